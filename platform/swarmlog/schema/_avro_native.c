/* swarmlog.schema._avro_native: the compiled Avro readers' common path in C.
 *
 * Why. Every reader of the log decodes what it acts on: a replay every message, a swarm
 * replay each message once for the agents it concerns, the sink every payload. The readers
 * compiled from a schema in Python (_avro_reader.compile_reader) take ~2.7 us for the bench's
 * agent.message; this walks the same schema, given as a small program of nested tuples, in C.
 *
 * The same datum, or the Python reader. A Program is built with the Python reader compiled
 * from the same schema as its fallback. The C walk reads only well-formed data: every read
 * is bounds-checked, every varint at most 10 bytes and 64 bits, every string strict UTF-8,
 * every union branch and enum index in range, and a block never promises more items than
 * bytes are left. At the first thing it does not accept it stops, throws away what it built,
 * and returns the Python reader's result for the same bytes -- the datum, or the error the
 * Python reader raises. So the C path never decides anything the Python reader would not
 * (tests/unit/test_avro_reader.py holds both to fastavro on every schema in schemas/, every
 * truncation and every single-byte change of encoded events).
 *
 * The program (built by _avro_reader._program):
 *   (NULL,) (BOOLEAN,) (LONG,) (FLOAT,) (DOUBLE,) (STRING,) (BYTES,) (FIXED, size)
 *   (ENUM, symbols) (UNION, branches) (ARRAY, item) (MAP, value) (RECORD, names, fields)
 * A record's dict has its fields in the schema's order, as the Python reader's.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h> /* offsetof */

enum { OP_NULL, OP_BOOLEAN, OP_LONG, OP_FLOAT, OP_DOUBLE, OP_STRING, OP_BYTES, OP_FIXED, OP_ENUM, OP_UNION,
       OP_ARRAY, OP_MAP, OP_RECORD };

#define MAX_DEPTH 64

typedef struct {
    const unsigned char *b;
    Py_ssize_t n;
    Py_ssize_t i;
} Buf;

/* 0 with *out, or -1: past the end, more than 10 bytes, beyond 64 bits. */
static int
read_long(Buf *buf, long long *out)
{
    unsigned long long acc = 0;
    int shift = 0;
    for (;;) {
        if (buf->i >= buf->n || shift > 63)
            return -1;
        unsigned char x = buf->b[buf->i++];
        if (shift == 63 && (x & 0x7E))
            return -1;
        acc |= (unsigned long long)(x & 0x7F) << shift;
        if (x < 0x80)
            break;
        shift += 7;
    }
    *out = (long long)(acc >> 1) ^ -(long long)(acc & 1);
    return 0;
}

static int
read_len(Buf *buf, Py_ssize_t *len)
{
    long long l;
    if (read_long(buf, &l) < 0 || l < 0 || l > buf->n - buf->i)
        return -1;
    *len = (Py_ssize_t)l;
    return 0;
}

/* A new reference to the datum, or NULL: with an error set for a real failure (memory), with none
   for data the C path does not accept (the caller then asks the Python reader). */
static PyObject *read_datum(PyObject *prog, Buf *buf, int depth);

static PyObject *
read_block(PyObject *prog, Buf *buf, int depth, int is_map)
{
    PyObject *item = PyTuple_GET_ITEM(prog, 1);
    PyObject *out = is_map ? PyDict_New() : PyList_New(0);
    if (out == NULL)
        return NULL;
    for (;;) {
        long long count, size;
        if (read_long(buf, &count) < 0)
            goto reject;
        if (count == 0)
            return out;
        if (count < 0) {
            if (count == LLONG_MIN)
                goto reject;
            count = -count;
            if (read_long(buf, &size) < 0)
                goto reject;
        }
        if (count > buf->n - buf->i) /* not even one byte an item: the Python reader decides */
            goto reject;
        for (long long k = 0; k < count; k++) {
            if (is_map) {
                Py_ssize_t len;
                if (read_len(buf, &len) < 0)
                    goto reject;
                PyObject *key = PyUnicode_DecodeUTF8((const char *)buf->b + buf->i, len, NULL);
                if (key == NULL)
                    goto reject_clear;
                buf->i += len;
                PyObject *value = read_datum(item, buf, depth + 1);
                if (value == NULL) {
                    Py_DECREF(key);
                    goto fail;
                }
                int rc = PyDict_SetItem(out, key, value);
                Py_DECREF(key);
                Py_DECREF(value);
                if (rc < 0)
                    goto fail;
            }
            else {
                PyObject *value = read_datum(item, buf, depth + 1);
                if (value == NULL)
                    goto fail;
                int rc = PyList_Append(out, value);
                Py_DECREF(value);
                if (rc < 0)
                    goto fail;
            }
        }
    }
reject_clear:
    PyErr_Clear();
reject:
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *
read_datum(PyObject *prog, Buf *buf, int depth)
{
    if (depth > MAX_DEPTH)
        return NULL;
    long op = PyLong_AsLong(PyTuple_GET_ITEM(prog, 0));
    switch (op) {
    case OP_NULL:
        Py_RETURN_NONE;
    case OP_BOOLEAN:
        if (buf->i >= buf->n)
            return NULL;
        return PyBool_FromLong(buf->b[buf->i++] != 0);
    case OP_LONG: {
        long long v;
        if (read_long(buf, &v) < 0)
            return NULL;
        return PyLong_FromLongLong(v);
    }
    case OP_FLOAT: {
        if (buf->n - buf->i < 4)
            return NULL;
        double d = PyFloat_Unpack4((const char *)buf->b + buf->i, 1);
        if (d == -1.0 && PyErr_Occurred())
            return NULL;
        buf->i += 4;
        return PyFloat_FromDouble(d);
    }
    case OP_DOUBLE: {
        if (buf->n - buf->i < 8)
            return NULL;
        double d = PyFloat_Unpack8((const char *)buf->b + buf->i, 1);
        if (d == -1.0 && PyErr_Occurred())
            return NULL;
        buf->i += 8;
        return PyFloat_FromDouble(d);
    }
    case OP_STRING: {
        Py_ssize_t len;
        if (read_len(buf, &len) < 0)
            return NULL;
        PyObject *s = PyUnicode_DecodeUTF8((const char *)buf->b + buf->i, len, NULL);
        if (s == NULL) {
            PyErr_Clear(); /* not UTF-8: the Python reader raises it */
            return NULL;
        }
        buf->i += len;
        return s;
    }
    case OP_BYTES: {
        Py_ssize_t len;
        if (read_len(buf, &len) < 0)
            return NULL;
        PyObject *s = PyBytes_FromStringAndSize((const char *)buf->b + buf->i, len);
        buf->i += len;
        return s;
    }
    case OP_FIXED: {
        Py_ssize_t len = PyLong_AsSsize_t(PyTuple_GET_ITEM(prog, 1));
        if (len < 0 || len > buf->n - buf->i)
            return NULL;
        PyObject *s = PyBytes_FromStringAndSize((const char *)buf->b + buf->i, len);
        buf->i += len;
        return s;
    }
    case OP_ENUM: {
        PyObject *symbols = PyTuple_GET_ITEM(prog, 1);
        long long k;
        if (read_long(buf, &k) < 0 || k < 0 || k >= PyTuple_GET_SIZE(symbols))
            return NULL;
        return Py_NewRef(PyTuple_GET_ITEM(symbols, (Py_ssize_t)k));
    }
    case OP_UNION: {
        PyObject *branches = PyTuple_GET_ITEM(prog, 1);
        long long k;
        if (read_long(buf, &k) < 0 || k < 0 || k >= PyTuple_GET_SIZE(branches))
            return NULL;
        return read_datum(PyTuple_GET_ITEM(branches, (Py_ssize_t)k), buf, depth + 1);
    }
    case OP_ARRAY:
        return read_block(prog, buf, depth, 0);
    case OP_MAP:
        return read_block(prog, buf, depth, 1);
    case OP_RECORD: {
        PyObject *names = PyTuple_GET_ITEM(prog, 1), *fields = PyTuple_GET_ITEM(prog, 2);
        Py_ssize_t nf = PyTuple_GET_SIZE(fields);
        PyObject *rec = PyDict_New();
        if (rec == NULL)
            return NULL;
        for (Py_ssize_t f = 0; f < nf; f++) {
            PyObject *value = read_datum(PyTuple_GET_ITEM(fields, f), buf, depth + 1);
            if (value == NULL) {
                Py_DECREF(rec);
                return NULL;
            }
            int rc = PyDict_SetItem(rec, PyTuple_GET_ITEM(names, f), value);
            Py_DECREF(value);
            if (rc < 0) {
                Py_DECREF(rec);
                return NULL;
            }
        }
        return rec;
    }
    default:
        return NULL;
    }
}

typedef struct {
    PyObject_HEAD
    PyObject *program;
    PyObject *fallback; /* the Python reader of the same schema: read(b, i) */
    vectorcallfunc vectorcall;
} Program;

/* Whether `prog` is a program read_datum can walk without checking its shape (it does not). */
static int
valid_program(PyObject *prog, int depth)
{
    if (depth > MAX_DEPTH || !PyTuple_CheckExact(prog) || PyTuple_GET_SIZE(prog) < 1
        || !PyLong_CheckExact(PyTuple_GET_ITEM(prog, 0)))
        return 0;
    long op = PyLong_AsLong(PyTuple_GET_ITEM(prog, 0));
    Py_ssize_t n = PyTuple_GET_SIZE(prog);
    switch (op) {
    case OP_NULL: case OP_BOOLEAN: case OP_LONG: case OP_FLOAT: case OP_DOUBLE: case OP_STRING: case OP_BYTES:
        return n == 1;
    case OP_FIXED:
        return n == 2 && PyLong_CheckExact(PyTuple_GET_ITEM(prog, 1)) && PyLong_AsSsize_t(PyTuple_GET_ITEM(prog, 1)) >= 0;
    case OP_ENUM:
        return n == 2 && PyTuple_CheckExact(PyTuple_GET_ITEM(prog, 1));
    case OP_UNION: {
        if (n != 2 || !PyTuple_CheckExact(PyTuple_GET_ITEM(prog, 1)))
            return 0;
        PyObject *branches = PyTuple_GET_ITEM(prog, 1);
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(branches); k++)
            if (!valid_program(PyTuple_GET_ITEM(branches, k), depth + 1))
                return 0;
        return 1;
    }
    case OP_ARRAY: case OP_MAP:
        return n == 2 && valid_program(PyTuple_GET_ITEM(prog, 1), depth + 1);
    case OP_RECORD: {
        if (n != 3 || !PyTuple_CheckExact(PyTuple_GET_ITEM(prog, 1)) || !PyTuple_CheckExact(PyTuple_GET_ITEM(prog, 2)))
            return 0;
        PyObject *names = PyTuple_GET_ITEM(prog, 1), *fields = PyTuple_GET_ITEM(prog, 2);
        if (PyTuple_GET_SIZE(names) != PyTuple_GET_SIZE(fields))
            return 0;
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(fields); k++)
            if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(names, k)) || !valid_program(PyTuple_GET_ITEM(fields, k), depth + 1))
                return 0;
        return 1;
    }
    default:
        return 0;
    }
}

/* read(b, i): the datum whose encoding starts at b[i], as the Python reader reads it. */
static PyObject *
Program_call(Program *p, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs == 2 && kwnames == NULL && PyBytes_CheckExact(args[0]) && PyLong_CheckExact(args[1])) {
        Py_ssize_t start = PyLong_AsSsize_t(args[1]);
        if (start >= 0 && start <= PyBytes_GET_SIZE(args[0])) {
            Buf buf = {(const unsigned char *)PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0]), start};
            PyObject *datum = read_datum(p->program, &buf, 0);
            if (datum != NULL)
                return datum;
            if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_MemoryError))
                PyErr_Clear();
            if (PyErr_Occurred())
                return NULL;
        }
        else if (start == -1 && PyErr_Occurred()) {
            PyErr_Clear();
        }
    }
    return PyObject_Vectorcall(p->fallback, args, nargsf, kwnames);
}

static PyObject *
Program_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *program, *fallback;
    static char *kwlist[] = {"program", "fallback", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O:Program", kwlist, &PyTuple_Type, &program, &fallback))
        return NULL;
    if (!PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "Program: fallback must be the Python reader (callable)");
        return NULL;
    }
    if (!valid_program(program, 0)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "Program: not a reader program (see swarmlog.schema._avro_reader._program)");
        return NULL;
    }
    Program *p = (Program *)type->tp_alloc(type, 0);
    if (p == NULL)
        return NULL;
    p->program = Py_NewRef(program);
    p->fallback = Py_NewRef(fallback);
    p->vectorcall = (vectorcallfunc)Program_call;
    return (PyObject *)p;
}

static int
Program_traverse(Program *p, visitproc visit, void *arg)
{
    Py_VISIT(p->program);
    Py_VISIT(p->fallback);
    return 0;
}

static int
Program_clear(Program *p)
{
    Py_CLEAR(p->program);
    Py_CLEAR(p->fallback);
    return 0;
}

static void
Program_dealloc(Program *p)
{
    PyObject_GC_UnTrack(p);
    Program_clear(p);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static PyTypeObject ProgramType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "swarmlog.schema._avro_native.Program",
    .tp_doc = "Program(program, fallback): read(b, i) walks the program in C; fallback(b, i) reads "
              "whatever the C walk does not accept.",
    .tp_basicsize = sizeof(Program),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = Program_new,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Program, vectorcall),
    .tp_dealloc = (destructor)Program_dealloc,
    .tp_traverse = (traverseproc)Program_traverse,
    .tp_clear = (inquiry)Program_clear,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "swarmlog.schema._avro_native",
    .m_doc = "The compiled Avro readers' common path in C (see swarmlog.schema._avro_reader).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__avro_native(void)
{
    if (PyType_Ready(&ProgramType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Program", (PyObject *)&ProgramType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    const char *ops[] = {"NULL", "BOOLEAN", "LONG", "FLOAT", "DOUBLE", "STRING", "BYTES", "FIXED", "ENUM", "UNION",
                         "ARRAY", "MAP", "RECORD"};
    for (int k = 0; k < (int)(sizeof(ops) / sizeof(ops[0])); k++)
        if (PyModule_AddIntConstant(m, ops[k], k) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    return m;
}
