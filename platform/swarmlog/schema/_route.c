/* swarmlog.schema._route: Decoder.route and Decoder.envelope_route, their common path in C.
 *
 * Why. Every reader of a swarm's log routes every message: a live agent by its envelope
 * (envelope_route), a swarm replay and an agent's first pass by its envelope with the routing
 * headers checked against it (route). In Python that is ~1.2 us and ~2.4 us a message; a
 * 5-agent swarm routes each message five times. Here it is one C call.
 *
 * What it does is the Python path's common case and nothing else (swarmlog.schema.codec,
 * swarmlog.log.protocol.checked_route), so the Python path stays the definition:
 *
 *   - the value is `C3 01 | fingerprint | Avro body` and the fingerprint is in the decoder's
 *     `_kinds` (fingerprint -> (event type, its bytes, version as sl.v spells it));
 *   - the envelope's event_id, run_id, agent_id, event_type strings, schema_version long and
 *     `to` (null|string) are well formed and inside the value;
 *   - route(): the headers are absent or empty (routed by the envelope), or exactly
 *     sl.type, sl.v, sl.agent[, sl.to] as the envelope says, optionally followed by the
 *     sl.step header its event id (`agent@step#i`) names; the agent and recipient are UTF-8.
 *
 * Anything else -- an unknown fingerprint, a truncated envelope, headers in another order, a
 * header that lies, a state digest's step -- is handed to the Python path (`fallback(msg)`),
 * which decides, learns (a new fingerprint's kind) and raises what it raises. So a message
 * gets the same Route, or the same error, with or without this module; the unit tests hold the
 * two paths equal on well-formed and on mangled messages.
 *
 * Optional, as the guard's hook is: where it cannot be compiled swarmlog runs the Python path.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_avro_binary.h"

#define MAGIC0 0xC3
#define MAGIC1 0x01
#define HEADER_LEN 10 /* magic + 8-byte fingerprint */

typedef struct {
    PyObject_HEAD
    PyObject *kinds;            /* dict: fingerprint bytes -> (type str, type bytes, version bytes) */
    PyObject *checked_fallback; /* the Python route(msg) */
    PyObject *envelope_fallback; /* the Python envelope_route(msg) */
    PyTypeObject *route_type;   /* swarmlog.log.protocol.Route (a tuple subclass) */
    PyObject *h_type, *h_version, *h_agent, *h_to, *h_step; /* the header names */
    PyObject *m_value, *m_headers; /* "value", "headers" */
} Router;

/* A string at b[*i]: its start and length, *i past it; -1 if malformed or past n. */
static int
read_string(const unsigned char *b, Py_ssize_t n, Py_ssize_t *i, Py_ssize_t *start, Py_ssize_t *len)
{
    if (avro_read_length(b, n, i, len) < 0)
        return -1;
    *start = *i;
    *i += *len;
    return 0;
}

typedef struct {
    Py_ssize_t id, id_len, agent, agent_len, to, to_len; /* to < 0: null */
} Envelope;

static int
read_envelope(const unsigned char *b, Py_ssize_t n, Envelope *e)
{
    Py_ssize_t i = HEADER_LEN, s, l;
    long long version;
    if (read_string(b, n, &i, &e->id, &e->id_len) < 0)
        return -1;
    if (read_string(b, n, &i, &s, &l) < 0) /* run_id */
        return -1;
    if (read_string(b, n, &i, &e->agent, &e->agent_len) < 0)
        return -1;
    if (read_string(b, n, &i, &s, &l) < 0) /* event_type */
        return -1;
    if (avro_read_long(b, n, &i, &version) < 0)
        return -1;
    if (i >= n)
        return -1;
    if (b[i] == 0) {
        e->to = -1;
        e->to_len = 0;
        return 0;
    }
    if (b[i] != 2)
        return -1;
    i++;
    return read_string(b, n, &i, &e->to, &e->to_len);
}

/* The digits of an `agent@step#i` id's step (as swarmlog.log.protocol.step_of); 0 if it names none
   that way (no '#': a state digest's id, left to the Python path). */
static int
step_digits(const unsigned char *id, Py_ssize_t n, Py_ssize_t *start, Py_ssize_t *len)
{
    Py_ssize_t at = -1, hash = -1, k;
    for (k = n - 1; k >= 0; k--)
        if (id[k] == '@') {
            at = k;
            break;
        }
    for (k = at + 1; k < n; k++)
        if (id[k] == '#') {
            hash = k;
            break;
        }
    if (hash < 0 || hash == at + 1 || hash == n - 1)
        return 0;
    for (k = at + 1; k < n; k++)
        if (k != hash && (id[k] < '0' || id[k] > '9'))
            return 0;
    *start = at + 1;
    *len = hash - at - 1;
    return 1;
}

/* Whether `item` is exactly the tuple (name, the len bytes at p). */
static int
header_is(PyObject *item, PyObject *name, const unsigned char *p, Py_ssize_t len)
{
    if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2)
        return 0;
    PyObject *k = PyTuple_GET_ITEM(item, 0), *v = PyTuple_GET_ITEM(item, 1);
    if (!PyUnicode_CheckExact(k) || !PyBytes_CheckExact(v))
        return 0;
    if (k != name && PyUnicode_Compare(k, name) != 0)
        return 0;
    return PyBytes_GET_SIZE(v) == len && memcmp(PyBytes_AS_STRING(v), p, (size_t)len) == 0;
}

/* A new Route(type, agent, to, step), stealing agent, to and step; NULL with an error set. */
static PyObject *
new_route(Router *r, PyObject *type, PyObject *agent, PyObject *to, PyObject *step)
{
    PyObject *route = r->route_type->tp_alloc(r->route_type, 4);
    if (route == NULL) {
        Py_DECREF(agent);
        Py_DECREF(to);
        Py_DECREF(step);
        return NULL;
    }
    Py_INCREF(type);
    PyTuple_SET_ITEM(route, 0, type);
    PyTuple_SET_ITEM(route, 1, agent);
    PyTuple_SET_ITEM(route, 2, to);
    PyTuple_SET_ITEM(route, 3, step);
    return route;
}

#define FALLBACK 1

/* The route of msg by its common path, or FALLBACK (nothing set), or NULL with an error set. */
static PyObject *
route_common(Router *r, PyObject *msg, int checked)
{
    PyObject *value = PyObject_CallMethodNoArgs(msg, r->m_value);
    if (value == NULL)
        return NULL;
    PyObject *result = (PyObject *)FALLBACK;
    PyObject *headers = NULL, *fp = NULL, *kind, *agent = NULL, *to = NULL, *step = NULL;
    if (!PyBytes_CheckExact(value))
        goto done;
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(value);
    Py_ssize_t n = PyBytes_GET_SIZE(value);
    if (n <= HEADER_LEN || b[0] != MAGIC0 || b[1] != MAGIC1)
        goto done;
    fp = PyBytes_FromStringAndSize((const char *)b + 2, HEADER_LEN - 2);
    if (fp == NULL) {
        result = NULL;
        goto done;
    }
    kind = PyDict_GetItemWithError(r->kinds, fp); /* borrowed */
    if (kind == NULL) {
        if (PyErr_Occurred())
            result = NULL;
        goto done;
    }
    if (!PyTuple_CheckExact(kind) || PyTuple_GET_SIZE(kind) != 3 || !PyBytes_CheckExact(PyTuple_GET_ITEM(kind, 1))
        || !PyBytes_CheckExact(PyTuple_GET_ITEM(kind, 2)))
        goto done;
    Envelope e;
    if (read_envelope(b, n, &e) < 0)
        goto done;
    Py_ssize_t step_at = 0, step_len = -1;
    if (checked) {
        headers = PyObject_CallMethodNoArgs(msg, r->m_headers);
        if (headers == NULL) {
            result = NULL;
            goto done;
        }
        if (headers != Py_None) {
            if (!PyList_CheckExact(headers))
                goto done;
            Py_ssize_t have = PyList_GET_SIZE(headers);
            if (have > 0) {
                PyObject *type_b = PyTuple_GET_ITEM(kind, 1), *version = PyTuple_GET_ITEM(kind, 2);
                Py_ssize_t want = e.to >= 0 ? 4 : 3;
                if (have != want && have != want + 1)
                    goto done;
                if (!header_is(PyList_GET_ITEM(headers, 0), r->h_type, (const unsigned char *)PyBytes_AS_STRING(type_b),
                               PyBytes_GET_SIZE(type_b))
                    || !header_is(PyList_GET_ITEM(headers, 1), r->h_version,
                                  (const unsigned char *)PyBytes_AS_STRING(version), PyBytes_GET_SIZE(version))
                    || !header_is(PyList_GET_ITEM(headers, 2), r->h_agent, b + e.agent, e.agent_len)
                    || (e.to >= 0 && !header_is(PyList_GET_ITEM(headers, 3), r->h_to, b + e.to, e.to_len)))
                    goto done;
                if (have == want + 1) {
                    if (!step_digits(b + e.id, e.id_len, &step_at, &step_len))
                        goto done;
                    step_at += e.id;
                    if (!header_is(PyList_GET_ITEM(headers, want), r->h_step, b + step_at, step_len))
                        goto done;
                }
            }
        }
    }
    agent = PyUnicode_DecodeUTF8((const char *)b + e.agent, e.agent_len, NULL);
    if (agent == NULL) {
        PyErr_Clear(); /* the Python path raises it */
        goto done;
    }
    if (e.to >= 0) {
        to = PyUnicode_DecodeUTF8((const char *)b + e.to, e.to_len, NULL);
        if (to == NULL) {
            PyErr_Clear();
            goto done;
        }
    }
    else {
        to = Py_NewRef(Py_None);
    }
    if (step_len >= 0) {
        /* The step header's bytes are its digits: the same int Python's int(b"...") gives. */
        PyObject *digits = PyUnicode_DecodeASCII((const char *)b + step_at, step_len, NULL);
        if (digits == NULL) {
            result = NULL;
            goto done;
        }
        step = PyLong_FromUnicodeObject(digits, 10);
        Py_DECREF(digits);
        if (step == NULL) {
            result = NULL;
            goto done;
        }
    }
    else {
        step = Py_NewRef(Py_None);
    }
    result = new_route(r, PyTuple_GET_ITEM(kind, 0), agent, to, step);
    agent = to = step = NULL; /* stolen */
done:
    Py_DECREF(value);
    Py_XDECREF(headers);
    Py_XDECREF(fp);
    Py_XDECREF(agent);
    Py_XDECREF(to);
    Py_XDECREF(step);
    return result;
}

static PyObject *
Router_route(Router *r, PyObject *msg)
{
    PyObject *result = route_common(r, msg, 1);
    if (result == (PyObject *)FALLBACK)
        return PyObject_CallOneArg(r->checked_fallback, msg);
    return result;
}

static PyObject *
Router_envelope_route(Router *r, PyObject *msg)
{
    PyObject *result = route_common(r, msg, 0);
    if (result == (PyObject *)FALLBACK)
        return PyObject_CallOneArg(r->envelope_fallback, msg);
    return result;
}

static int
Router_init(Router *r, PyObject *args, PyObject *kwds)
{
    PyObject *kinds, *checked, *envelope, *route_type, *names;
    static char *kwlist[] = {"kinds", "route", "envelope_route", "route_type", "header_names", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!OOO!O!:Router", kwlist, &PyDict_Type, &kinds, &checked,
                                     &envelope, &PyType_Type, &route_type, &PyTuple_Type, &names))
        return -1;
    if (!PyType_IsSubtype((PyTypeObject *)route_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "Router: route_type must be a tuple subclass (swarmlog.log.protocol.Route)");
        return -1;
    }
    if (PyTuple_GET_SIZE(names) != 5) {
        PyErr_SetString(PyExc_TypeError, "Router: header_names is (sl.type, sl.v, sl.agent, sl.to, sl.step)");
        return -1;
    }
    for (int k = 0; k < 5; k++)
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(names, k))) {
            PyErr_SetString(PyExc_TypeError, "Router: header names are str");
            return -1;
        }
    Py_XSETREF(r->kinds, Py_NewRef(kinds));
    Py_XSETREF(r->checked_fallback, Py_NewRef(checked));
    Py_XSETREF(r->envelope_fallback, Py_NewRef(envelope));
    Py_XSETREF(r->route_type, (PyTypeObject *)Py_NewRef(route_type));
    Py_XSETREF(r->h_type, Py_NewRef(PyTuple_GET_ITEM(names, 0)));
    Py_XSETREF(r->h_version, Py_NewRef(PyTuple_GET_ITEM(names, 1)));
    Py_XSETREF(r->h_agent, Py_NewRef(PyTuple_GET_ITEM(names, 2)));
    Py_XSETREF(r->h_to, Py_NewRef(PyTuple_GET_ITEM(names, 3)));
    Py_XSETREF(r->h_step, Py_NewRef(PyTuple_GET_ITEM(names, 4)));
    if (r->m_value == NULL && (r->m_value = PyUnicode_InternFromString("value")) == NULL)
        return -1;
    if (r->m_headers == NULL && (r->m_headers = PyUnicode_InternFromString("headers")) == NULL)
        return -1;
    return 0;
}

static int
Router_traverse(Router *r, visitproc visit, void *arg)
{
    Py_VISIT(r->kinds);
    Py_VISIT(r->checked_fallback);
    Py_VISIT(r->envelope_fallback);
    Py_VISIT(r->route_type);
    return 0;
}

static int
Router_clear(Router *r)
{
    Py_CLEAR(r->kinds);
    Py_CLEAR(r->checked_fallback);
    Py_CLEAR(r->envelope_fallback);
    Py_CLEAR(r->route_type);
    Py_CLEAR(r->h_type);
    Py_CLEAR(r->h_version);
    Py_CLEAR(r->h_agent);
    Py_CLEAR(r->h_to);
    Py_CLEAR(r->h_step);
    Py_CLEAR(r->m_value);
    Py_CLEAR(r->m_headers);
    return 0;
}

static void
Router_dealloc(Router *r)
{
    PyObject_GC_UnTrack(r);
    Router_clear(r);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyMethodDef Router_methods[] = {
    {"route", (PyCFunction)Router_route, METH_O,
     "The message's Route by its envelope, its routing headers checked (Decoder.route)."},
    {"envelope_route", (PyCFunction)Router_envelope_route, METH_O,
     "The message's Route by its envelope alone (Decoder.envelope_route)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RouterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "swarmlog.schema._route.Router",
    .tp_doc = "Router(kinds, route, envelope_route, route_type, header_names): the common path of a "
              "Decoder's routing, the Python path (route, envelope_route) for the rest.",
    .tp_basicsize = sizeof(Router),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Router_init,
    .tp_dealloc = (destructor)Router_dealloc,
    .tp_traverse = (traverseproc)Router_traverse,
    .tp_clear = (inquiry)Router_clear,
    .tp_methods = Router_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "swarmlog.schema._route",
    .m_doc = "Decoder.route and Decoder.envelope_route, their common path in C (see swarmlog.schema.codec).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__route(void)
{
    if (PyType_Ready(&RouterType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Router", (PyObject *)&RouterType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
