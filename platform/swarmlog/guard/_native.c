/* swarmlog.guard._native: the guard's profile hook, its common path in C.
 *
 * Why. Inside a handler every call and every return is a profile event. A profile function
 * written in Python costs each of them a Python call (CPython's profile_trampoline, then the
 * frame of `_hook.hook`), ~220 ns before it does anything; almost every event then finds that
 * nothing is refused. Here those events cost a C call and one or two dict lookups, and only the
 * rest reaches the Python hook, which keeps every rule, every cache and every error:
 *
 *   c_call    `arg` in `_hook._functions`: `()` -> nothing to do; rows -> the Python hook.
 *             Not there, a C function whose `type(__self__)` is in `_rules.BY_TYPE` with no rules,
 *             and not a module -> nothing to do. Anything else (a type not seen yet, a type with
 *             rules, LOOK_UP_AS_CLASS, a module's function the Python hook caches as harmless)
 *             -> the Python hook, which learns and caches; the next call is then one lookup here.
 *   call      the code's `co_qualname` not in `_rules.CODES` -> nothing to do; else the Python hook.
 *   return, c_return, c_exception -> nothing to do.
 *
 * The tables are the Python hook's own dict objects (`bind`), read here and written only there
 * (`_functions.clear()` / `.update()` and the `_learn` caches mutate in place: never rebound).
 *
 * The profile function is installed with the Python hook as its object, so `sys.getprofile()`
 * returns `_hook.hook` under either hook and every `getprofile()` check means what it meant.
 * Handing an event to the Python hook does what CPython 3.11's profile_trampoline
 * (Python/sysmodule.c) does for a Python profile function — the frame's locals dict refreshed if
 * it was materialised, the call, the locals written back, and on an exception the profile
 * function uninstalled and -1 returned — so a raise uninstalls the hook, and the guard's re-arm
 * machinery (`_hook._arm_rearm`, `rearm`) works as it does for the Python hook.
 *
 * CPython 3.11 only: the frame's `f_fast_as_locals` flag is read from its internal struct
 * (Include/internal/pycore_frame.h), and 3.12 profiles through sys.monitoring. Elsewhere the
 * module imports as an ImportError and the Python hook stands in.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>  /* PyFrame_FastToLocalsWithError, PyFrame_LocalsToFast */

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000 && !defined(PYPY_VERSION)
#define SWARMLOG_NATIVE_HOOK 1
#define Py_BUILD_CORE 1
#include "internal/pycore_frame.h"  /* struct _frame: f_fast_as_locals */
#undef Py_BUILD_CORE
#endif

#ifdef SWARMLOG_NATIVE_HOOK

/* Strong references, set by bind(): the Python hook and the three tables it keeps. */
static PyObject *hook = NULL;
static PyObject *functions = NULL;  /* _hook._functions: C function -> rows, () when harmless */
static PyObject *by_type = NULL;    /* _rules.BY_TYPE: type of __self__ -> {method name: rules} */
static PyObject *codes = NULL;      /* _rules.CODES: co_qualname -> ((code, entries), ...) */
/* The event names the Python hook is called with, interned as CPython's own are. */
static PyObject *call_event = NULL;
static PyObject *c_call_event = NULL;

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

/* Whether a C call needs nothing from the Python hook. A failed lookup (it cannot fail for a
   C function, whose hash and equality are its self's and its C pointer's) goes to the Python
   hook, which makes it again and raises what it raises. */
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
    PyTypeObject *klass = Py_TYPE(self != NULL ? self : Py_None);
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

/* Whether a Python function's start needs nothing from the Python hook. */
static int
call_needs_nothing(PyFrameObject *frame)
{
    PyCodeObject *code = PyFrame_GetCode(frame);  /* new reference */
    PyObject *found = PyDict_GetItemWithError(codes, code->co_qualname);  /* borrowed */
    Py_DECREF(code);
    if (found == NULL && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return found == NULL;
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
    case PyTrace_CALL:
        if (call_needs_nothing(frame)) {
            return 0;
        }
        break;
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
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "bind() takes 4 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!PyCallable_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "bind(): the hook must be callable");
        return NULL;
    }
    for (Py_ssize_t i = 1; i < 4; i++) {
        if (!PyDict_CheckExact(args[i])) {  /* a dict subclass could run Python code in a lookup */
            PyErr_SetString(PyExc_TypeError, "bind(): the tables must be dicts");
            return NULL;
        }
    }
    Py_XSETREF(hook, Py_NewRef(args[0]));
    Py_XSETREF(functions, Py_NewRef(args[1]));
    Py_XSETREF(by_type, Py_NewRef(args[2]));
    Py_XSETREF(codes, Py_NewRef(args[3]));
    Py_RETURN_NONE;
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

#endif /* SWARMLOG_NATIVE_HOOK */

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "swarmlog.guard._native",
    .m_doc = "The determinism guard's profile hook, its common path in C (see _native.c).",
    .m_size = -1,  /* one hook and one set of tables per process: module-level state */
#ifdef SWARMLOG_NATIVE_HOOK
    .m_methods = methods,
#endif
};

PyMODINIT_FUNC
PyInit__native(void)
{
#ifdef SWARMLOG_NATIVE_HOOK
    if (call_event == NULL) {
        call_event = PyUnicode_InternFromString("call");
        c_call_event = PyUnicode_InternFromString("c_call");
        if (call_event == NULL || c_call_event == NULL) {
            return NULL;
        }
    }
    return PyModule_Create(&module_def);
#else
    PyErr_SetString(PyExc_ImportError, "swarmlog.guard._native is built for CPython 3.11 only; "
                                       "the guard's Python hook stands in");
    return NULL;
#endif
}
