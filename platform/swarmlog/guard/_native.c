/* swarmlog.guard._native: the guard's hook, its common path in C.
 *
 * Why. Inside a handler every call is an event for the guard. A hook written in Python costs each
 * of them a Python call before it does anything, and almost every event then finds that nothing is
 * refused. Here those events cost a C call and one or two dict lookups, and only the rest reaches
 * the Python hook (`_hook.hook`), which keeps every rule, every cache and every error:
 *
 *   a C call     the function in `_hook._functions`: `()` -> nothing to do; rows -> the Python hook.
 *                Not there, a C function whose `type(__self__)` is in `_rules.BY_TYPE` with no rules,
 *                and not a module -> nothing to do. Anything else (a type not seen yet, a type with
 *                rules, LOOK_UP_AS_CLASS, a module's function the Python hook caches as harmless)
 *                -> the Python hook, which learns and caches; the next call is then one lookup here.
 *   a Python     the code's `co_qualname` not in `_rules.CODES` -> nothing to do; else the Python hook.
 *   function starting
 *   a return     nothing to do (the full hook ignores returns).
 *
 * The tables are the Python hook's own dict objects (`bind`), read here and written only there
 * (`_functions.clear()` / `.update()` and the `_learn` caches mutate in place: never rebound).
 *
 * How the events arrive depends on the interpreter (`_hook` picks; bench/guard.py measures both):
 *
 * CPython 3.11: a profile function (PyEval_SetProfile), per thread. It is installed with the Python
 * hook as its object, so `sys.getprofile()` returns `_hook.hook`. Handing an event to the Python hook
 * does what CPython's profile_trampoline (Python/sysmodule.c) does for a Python profile function —
 * the frame's locals dict refreshed if it was materialised, the call, the locals written back, and on
 * an exception the profile function uninstalled and -1 returned — so a raise uninstalls the hook, and
 * the guard's re-arm machinery (`_hook._arm_rearm`, `rearm`) works as it does for the Python hook.
 * The frame's `f_fast_as_locals` flag is read from its internal struct
 * (Include/internal/pycore_frame.h).
 *
 * CPython 3.12 and later: sys.monitoring (PEP 669), through which 3.12 also runs every profile
 * function. The functions `on_call`, `on_start`, `on_return` and `on_unwind` are the callbacks of the
 * guard's own tool id (`_monitoring`); events are on for every thread once a guard has been entered,
 * and each callback first reads which hook this thread has (`current`, a thread-local: NULL outside
 * handlers, where it returns at once). Three things a profile function cannot do make this the faster
 * path (bench/README.md has the measurements): a Python function's start that no row names returns
 * DISABLE, so CPython never reports that function's start again, to any thread; a C method arrives as
 * its descriptor and `self`, with no bound method made per call; and entering or leaving a handler
 * only sets the thread-local, where switching a profile function on and off makes 3.12 re-instrument
 * the code it runs next. An exception raised by a callback is raised where the event happened and
 * leaves the hook in place, so nothing needs re-arming. A scope's lighter hook (a Logger call's, in
 * `_hook`) gets the events in a profile function's shape: (frame, "call" | "c_call" | "return", arg).
 *
 * Elsewhere (3.10 and older, PyPy) the module imports as an ImportError and the Python hook stands in.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>  /* PyFrame_FastToLocalsWithError, PyFrame_LocalsToFast */

#if !defined(PYPY_VERSION) && PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define SWARMLOG_PROFILE_HOOK 1
#define Py_BUILD_CORE 1
#include "internal/pycore_frame.h"  /* struct _frame: f_fast_as_locals */
#undef Py_BUILD_CORE
#elif !defined(PYPY_VERSION) && PY_VERSION_HEX >= 0x030C0000
#define SWARMLOG_MONITORING_HOOK 1
#endif

#if defined(SWARMLOG_PROFILE_HOOK) || defined(SWARMLOG_MONITORING_HOOK)

/* Strong references, set by bind(): the Python hook and the three tables it keeps. */
static PyObject *hook = NULL;
static PyObject *functions = NULL;  /* _hook._functions: C function -> rows, () when harmless */
static PyObject *by_type = NULL;    /* _rules.BY_TYPE: type of __self__ -> {method name: rules} */
static PyObject *codes = NULL;      /* _rules.CODES: co_qualname -> ((code, entries), ...) */
/* The event names the Python hook is called with, interned as CPython's own are. */
static PyObject *call_event = NULL;
static PyObject *c_call_event = NULL;
static PyObject *return_event = NULL;

/* Whether the C method rules of `self`'s type name nothing (BY_TYPE has the type, with no rules).
   A type not learned yet, or one with rules, goes to the Python hook. */
static int
type_needs_nothing(PyTypeObject *klass)
{
    if (klass == &PyModule_Type) {
        return 0;  /* the Python hook files a module's harmless function in `functions` */
    }
    PyObject *by_name = PyDict_GetItemWithError(by_type, (PyObject *)klass);  /* borrowed */
    if (by_name == NULL) {
        PyErr_Clear();
        return 0;
    }
    return PyDict_CheckExact(by_name) && PyDict_GET_SIZE(by_name) == 0;
}

/* Whether a call of the C function `fn` needs nothing from the Python hook. A failed lookup (it
   cannot fail for a C function, whose hash and equality are its self's and its C pointer's) goes to
   the Python hook, which makes it again and raises what it raises. */
static int
c_call_needs_nothing(PyObject *fn)
{
    PyObject *rows = PyDict_GetItemWithError(functions, fn);  /* borrowed */
    if (rows != NULL) {
        return PyTuple_CheckExact(rows) && PyTuple_GET_SIZE(rows) == 0;
    }
    if (PyErr_Occurred() || !PyCFunction_Check(fn)) {
        PyErr_Clear();
        return 0;
    }
    PyObject *self = PyCFunction_GET_SELF(fn);  /* borrowed; NULL for a METH_STATIC function */
    return type_needs_nothing(Py_TYPE(self != NULL ? self : Py_None));
}

/* Whether `code` is named by no row: its qualified name is not in CODES. -1: the lookup failed. */
static int
code_named_by_no_row(PyCodeObject *code)
{
    PyObject *found = PyDict_GetItemWithError(codes, code->co_qualname);  /* borrowed */
    if (found == NULL) {
        if (PyErr_Occurred()) {
            PyErr_Clear();
            return -1;
        }
        return 1;
    }
    return 0;
}

static int
check_bind(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t expected)
{
    if (nargs != expected) {
        PyErr_Format(PyExc_TypeError, "bind() takes %zd arguments (%zd given)", expected, nargs);
        return -1;
    }
    if (!PyCallable_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "bind(): the hook must be callable");
        return -1;
    }
    for (Py_ssize_t i = 1; i < 4; i++) {
        if (!PyDict_CheckExact(args[i])) {  /* a dict subclass could run Python code in a lookup */
            PyErr_SetString(PyExc_TypeError, "bind(): the tables must be dicts");
            return -1;
        }
    }
    return 0;
}

static void
bind_tables(PyObject *const *args)
{
    Py_XSETREF(hook, Py_NewRef(args[0]));
    Py_XSETREF(functions, Py_NewRef(args[1]));
    Py_XSETREF(by_type, Py_NewRef(args[2]));
    Py_XSETREF(codes, Py_NewRef(args[3]));
}

PyDoc_STRVAR(bound_doc,
"bound()\n--\n\n"
"(hook, functions, by_type, codes) as bound, or None before bind().");

static PyObject *
bound(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    if (hook == NULL) {
        Py_RETURN_NONE;
    }
    return PyTuple_Pack(4, hook, functions, by_type, codes);
}

#endif /* either hook */

#ifdef SWARMLOG_PROFILE_HOOK
/* --- CPython 3.11: a profile function ----------------------------------------------------------- */

/* Hand the event to the Python hook exactly as profile_trampoline would: `obj` is the profile
   object installed with this function (what sys.getprofile() returns), held by the thread state. */
static int
python_hook(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg)
{
    PyObject *stack[3] = {(PyObject *)frame, what == PyTrace_CALL ? call_event : c_call_event,
                          arg != NULL ? arg : Py_None};
    PyObject *result = NULL;
    /* Discard changes made to a materialised locals dict since, as call_trampoline does. */
    if (!frame->f_fast_as_locals || PyFrame_FastToLocalsWithError(frame) == 0) {
        result = PyObject_Vectorcall(obj, stack, 3, NULL);
        PyFrame_LocalsToFast(frame, 1);
    }
    if (result == NULL) {
        /* A profile function that raises is uninstalled (the exception stays pending); the guard
           has armed its re-arming trace function before raising. */
        _PyEval_SetProfile(PyThreadState_Get(), NULL, NULL);
        return -1;
    }
    Py_DECREF(result);
    return 0;
}

/* The profile function. `obj` is the Python hook (what sys.getprofile() returns). */
static int
profile(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg)
{
    switch (what) {
    case PyTrace_C_CALL:
        if (c_call_needs_nothing(arg)) {
            return 0;
        }
        break;
    case PyTrace_CALL: {
        PyCodeObject *code = PyFrame_GetCode(frame);  /* new reference */
        int nothing = code_named_by_no_row(code) == 1;
        Py_DECREF(code);
        if (nothing) {
            return 0;
        }
        break;
    }
    default:  /* return, c_return, c_exception: the Python hook ignores them too */
        return 0;
    }
    return python_hook(obj, frame, what, arg);
}

PyDoc_STRVAR(bind_doc,
"bind(hook, functions, by_type, codes)\n--\n\n"
"Keep the Python hook and its tables (the same dict objects) for the profile function.");

static PyObject *
bind(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (check_bind(args, nargs, 4) < 0) {
        return NULL;
    }
    bind_tables(args);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(install_doc,
"install()\n--\n\n"
"Make the C profile function this thread's profile function, with the bound hook as its object\n"
"(sys.getprofile() returns the hook). It can only turn the guard on: sys.setprofile(None) takes it off.");

static PyObject *
install(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    if (hook == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "swarmlog.guard._native.install() before bind()");
        return NULL;
    }
    /* What sys.setprofile does, audit event included. */
    if (_PyEval_SetProfile(PyThreadState_Get(), profile, hook) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL, bind_doc},
    {"bound", bound, METH_NOARGS, bound_doc},
    {"install", install, METH_NOARGS, install_doc},
    {NULL, NULL, 0, NULL},
};

#define SWARMLOG_API "profile"

#endif /* SWARMLOG_PROFILE_HOOK */

#ifdef SWARMLOG_MONITORING_HOOK
/* --- CPython 3.12+: sys.monitoring callbacks ---------------------------------------------------- */

#ifndef _Py_thread_local
#define _Py_thread_local _Thread_local
#endif

/* This thread's hook (a strong reference): NULL outside handlers, `hook` inside one, or a scope's
   lighter hook (a Logger call's). What sys.setprofile keeps per thread, kept here. */
static _Py_thread_local PyObject *current = NULL;
/* Set by bind(): sys.monitoring.MISSING (a CALL with no argument), sys.monitoring.DISABLE, the code
   objects whose starts only a scope's hook watches (a list), C methods' `self`s that rows name one by one
   (random's hidden Random), and what the first install() calls to turn the events on. */
static PyObject *missing = NULL;
static PyObject *disable = NULL;
static PyObject *watched = NULL;
static PyObject *bound_selves = NULL;
static PyObject *turn_on = NULL;
static int events_on = 0;

/* Hand an event to the thread's hook in a profile function's shape. The frame is the one the event
   happened in: the caller's for a call, the function's own for its start and its return. */
static PyObject *
hand_over(PyObject *obj, PyObject *event, PyObject *arg)
{
    PyFrameObject *frame = PyEval_GetFrame();  /* borrowed */
    if (frame == NULL) {
        Py_RETURN_NONE;
    }
    PyObject *stack[3] = {(PyObject *)frame, event, arg};
    Py_INCREF(obj);  /* the hook may replace itself (a Logger call's scope ending) */
    PyObject *result = PyObject_Vectorcall(obj, stack, 3, NULL);
    Py_DECREF(obj);
    if (result == NULL) {
        return NULL;  /* raised where the event happened; the hook stays installed */
    }
    Py_DECREF(result);
    Py_RETURN_NONE;
}

static int
is_bound_self(PyObject *self)
{
    Py_ssize_t n = PyTuple_GET_SIZE(bound_selves);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyTuple_GET_ITEM(bound_selves, i) == self) {
            return 1;
        }
    }
    return 0;
}

PyDoc_STRVAR(on_call_doc,
"on_call(code, instruction_offset, callable, arg0)\n--\n\n"
"The CALL callback: a C function or a C method's descriptor about to be called.");

static PyObject *
on_call(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    PyObject *obj = current;
    if (obj == NULL || nargs != 4) {
        Py_RETURN_NONE;  /* a thread outside handlers */
    }
    PyObject *callable = args[2];
    if (PyCFunction_Check(callable)) {
        if (obj == hook && c_call_needs_nothing(callable)) {
            Py_RETURN_NONE;
        }
        return hand_over(obj, c_call_event, callable);
    }
    PyObject *self = args[3];
    if (Py_IS_TYPE(callable, &PyMethodDescr_Type) && self != missing) {
        /* `obj.method(...)`: the descriptor and `self`, as a profile function never sees them. */
        if (obj == hook && !is_bound_self(self) && type_needs_nothing(Py_TYPE(self))) {
            Py_RETURN_NONE;
        }
        /* The Python hook takes the bound method, as a profile function's c_call event carries it. */
        PyObject *method = Py_TYPE(callable)->tp_descr_get(callable, self, (PyObject *)Py_TYPE(self));
        if (method == NULL) {
            PyErr_Clear();  /* a `self` of the wrong type: the call itself raises the TypeError */
            Py_RETURN_NONE;
        }
        PyObject *result = hand_over(obj, c_call_event, method);
        Py_DECREF(method);
        return result;
    }
    Py_RETURN_NONE;  /* a Python function (its start is an event of its own), a class, any other callable */
}

static int
is_watched(PyCodeObject *code)
{
    Py_ssize_t n = PyList_GET_SIZE(watched);  /* a handful; the list is `_hook`'s, appended to in place */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyList_GET_ITEM(watched, i) == (PyObject *)code) {
            return 1;
        }
    }
    return 0;
}

PyDoc_STRVAR(on_start_doc,
"on_start(code, instruction_offset)\n--\n\n"
"The PY_START and PY_RESUME callback: DISABLE for a function no row names, for every thread.");

static PyObject *
on_start(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2 || !PyCode_Check(args[0])) {
        Py_RETURN_NONE;
    }
    PyCodeObject *code = (PyCodeObject *)args[0];
    int no_row = code_named_by_no_row(code);
    if (no_row == 1 && !is_watched(code)) {
        /* Whether a row names a function does not depend on the thread or the moment: CPython
           need never report this start again (until sys.monitoring.restart_events()). */
        return Py_NewRef(disable);
    }
    PyObject *obj = current;
    if (obj == NULL || (obj == hook && no_row == 1)) {
        Py_RETURN_NONE;  /* outside handlers; or a start only a scope's hook watches */
    }
    return hand_over(obj, call_event, Py_None);
}

PyDoc_STRVAR(on_return_doc,
"on_return(code, instruction_offset, value)\n--\n\n"
"The PY_RETURN (local to the watched code objects) and PY_UNWIND callback: for a scope's hook only.");

static PyObject *
on_return(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    (void)nargs;
    PyObject *obj = current;
    if (obj == NULL || obj == hook) {
        Py_RETURN_NONE;  /* the full hook ignores returns */
    }
    return hand_over(obj, return_event, Py_None);
}

PyDoc_STRVAR(bind_monitoring_doc,
"bind(hook, functions, by_type, codes, missing, disable, watched, bound_selves, turn_on)\n--\n\n"
"Keep the Python hook, its tables (the same dict objects), sys.monitoring's MISSING and DISABLE, the\n"
"code objects a scope's hook watches, the `self`s rows name one by one, and what turns the events on.");

static PyObject *
bind(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (check_bind(args, nargs, 9) < 0) {
        return NULL;
    }
    if (!PyList_CheckExact(args[6]) || !PyTuple_CheckExact(args[7]) || !PyCallable_Check(args[8])) {
        PyErr_SetString(PyExc_TypeError, "bind(): watched must be a list, bound_selves a tuple, turn_on callable");
        return NULL;
    }
    bind_tables(args);
    Py_XSETREF(missing, Py_NewRef(args[4]));
    Py_XSETREF(disable, Py_NewRef(args[5]));
    Py_XSETREF(watched, Py_NewRef(args[6]));
    Py_XSETREF(bound_selves, Py_NewRef(args[7]));
    Py_XSETREF(turn_on, Py_NewRef(args[8]));
    events_on = 0;  /* bound again after the events were turned off (another API in between) */
    Py_RETURN_NONE;
}

static int
set_current(PyObject *obj)
{
    if (obj != NULL && !events_on) {
        /* The first hook installed in this process turns the events on, for good: a process that
           never enters a handler pays nothing; one that does pays no re-instrumentation per step. */
        PyObject *result = PyObject_CallNoArgs(turn_on);
        if (result == NULL) {
            return -1;
        }
        Py_DECREF(result);
        events_on = 1;
    }
    Py_XSETREF(current, Py_XNewRef(obj));
    return 0;
}

PyDoc_STRVAR(install_doc,
"install()\n--\n\n"
"Make the bound hook this thread's hook (the first time in this process, turn the events on).");

static PyObject *
install(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    if (hook == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "swarmlog.guard._native.install() before bind()");
        return NULL;
    }
    if (set_current(hook) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(setprofile_doc,
"setprofile(hook)\n--\n\n"
"Make `hook` this thread's hook, called as a profile function is; None: no hook on this thread.");

static PyObject *
setprofile(PyObject *module, PyObject *obj)
{
    (void)module;
    if (obj != Py_None && !PyCallable_Check(obj)) {
        PyErr_SetString(PyExc_TypeError, "setprofile(): a callable or None");
        return NULL;
    }
    if (hook == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "swarmlog.guard._native.setprofile() before bind()");
        return NULL;
    }
    if (set_current(obj == Py_None ? NULL : obj) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(getprofile_doc,
"getprofile()\n--\n\n"
"This thread's hook, or None.");

static PyObject *
getprofile(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return Py_NewRef(current != NULL ? current : Py_None);
}

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL, bind_monitoring_doc},
    {"bound", bound, METH_NOARGS, bound_doc},
    {"install", install, METH_NOARGS, install_doc},
    {"setprofile", setprofile, METH_O, setprofile_doc},
    {"getprofile", getprofile, METH_NOARGS, getprofile_doc},
    {"on_call", (PyCFunction)(void (*)(void))on_call, METH_FASTCALL, on_call_doc},
    {"on_start", (PyCFunction)(void (*)(void))on_start, METH_FASTCALL, on_start_doc},
    {"on_return", (PyCFunction)(void (*)(void))on_return, METH_FASTCALL, on_return_doc},
    {NULL, NULL, 0, NULL},
};

#define SWARMLOG_API "monitoring"

#endif /* SWARMLOG_MONITORING_HOOK */

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "swarmlog.guard._native",
    .m_doc = "The determinism guard's hook, its common path in C (see _native.c).",
    .m_size = -1,  /* one hook and one set of tables per process: module-level state */
#ifdef SWARMLOG_API
    .m_methods = methods,
#endif
};

PyMODINIT_FUNC
PyInit__native(void)
{
#ifdef SWARMLOG_API
    if (call_event == NULL) {
        call_event = PyUnicode_InternFromString("call");
        c_call_event = PyUnicode_InternFromString("c_call");
        return_event = PyUnicode_InternFromString("return");
        if (call_event == NULL || c_call_event == NULL || return_event == NULL) {
            return NULL;
        }
    }
    PyObject *module = PyModule_Create(&module_def);
    if (module != NULL && PyModule_AddStringConstant(module, "API", SWARMLOG_API) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
#else
    PyErr_SetString(PyExc_ImportError, "swarmlog.guard._native is built for CPython 3.11 and later only; "
                                       "the guard's Python hook stands in");
    return NULL;
#endif
}
