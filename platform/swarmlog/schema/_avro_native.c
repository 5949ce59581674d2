/* swarmlog.schema._avro_native: Avro binary's common paths in C -- the compiled readers, and an
 * event's bytes.
 *
 * Why. Every reader of the log decodes what it acts on: a replay every message, a swarm
 * replay each message once for the agents it concerns, the sink every payload. The readers
 * compiled from a schema in Python (_avro_reader.compile_reader) take ~2.7 us for the bench's
 * agent.message; this walks the same schema, given as a small program of nested tuples, in C.
 * Every writer encodes each event (Encoder.encode_event, ~0.9 us in Python): EventEncoder does
 * the envelope and a payload of the common shapes in ~0.3.
 *
 * The same datum, or the Python reader. A Program is built with the Python reader compiled
 * from the same schema as its fallback. The C walk reads only well-formed data: every read
 * is bounds-checked, every varint at most 10 bytes and 64 bits, every string strict UTF-8,
 * every union branch and enum index in range, a block never promises more items than
 * bytes are left, and the datum ends exactly where the value does. At the first thing it does
 * not accept it stops, throws away what it built, and returns the Python reader's result for
 * the same bytes -- the datum, or the error the Python reader raises. So the C path never
 * decides anything the Python reader would not (tests/unit/test_avro_reader.py holds both to
 * fastavro on every schema in schemas/, every truncation and every single-byte change of
 * encoded events, and every value with bytes after it).
 *
 * The same bytes, or the Python writer. EventEncoder writes only exact types (str, int within
 * the field's bits, float, bool, bytes, list or tuple, dict) and hands anything else -- a
 * subclass, a missing field (its default), an int for a double, a float beyond float32 -- to
 * the Python writers: the payload's to the generated payload writer, the envelope's to the
 * Python encode_event. tests/unit/test_event_encoder_native.py holds the two equal, bytes or
 * error.
 *
 * The read program (built by _avro_reader._program):
 *   (NULL,) (BOOLEAN,) (LONG,) (FLOAT,) (DOUBLE,) (STRING,) (BYTES,) (FIXED, size)
 *   (ENUM, symbols) (UNION, branches) (ARRAY, item) (MAP, value) (RECORD, names, fields)
 * A record's dict has its fields in the schema's order, as the Python reader's.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h> /* offsetof */

#include "_avro_binary.h"

enum { OP_NULL, OP_BOOLEAN, OP_LONG, OP_FLOAT, OP_DOUBLE, OP_STRING, OP_BYTES, OP_FIXED, OP_ENUM, OP_UNION,
       OP_ARRAY, OP_MAP, OP_RECORD };

#define MAX_DEPTH 64

typedef struct {
    const unsigned char *b;
    Py_ssize_t n;
    Py_ssize_t i;
} Buf;

static inline int
read_long(Buf *buf, long long *out)
{
    return avro_read_long(buf->b, buf->n, &buf->i, out);
}

static inline int
read_len(Buf *buf, Py_ssize_t *len)
{
    return avro_read_length(buf->b, buf->n, &buf->i, len);
}

/* A float (size 4) or a double (size 8), little-endian, as a Python float; NULL if it runs past the end. */
static PyObject *
read_real(Buf *buf, Py_ssize_t size)
{
    if (buf->n - buf->i < size)
        return NULL;
    const char *p = (const char *)buf->b + buf->i;
    double d = size == 4 ? PyFloat_Unpack4(p, 1) : PyFloat_Unpack8(p, 1);
    if (d == -1.0 && PyErr_Occurred())
        return NULL;
    buf->i += size;
    return PyFloat_FromDouble(d);
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
    case OP_FLOAT:
        return read_real(buf, 4);
    case OP_DOUBLE:
        return read_real(buf, 8);
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

/* read(b, i): the datum whose encoding starts at b[i] and ends where b does, as the Python reader
   reads it; anything else (bytes after the datum too) is the Python reader's to refuse. */
static PyObject *
Program_call(Program *p, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs == 2 && kwnames == NULL && PyBytes_CheckExact(args[0]) && PyLong_CheckExact(args[1])) {
        Py_ssize_t start = PyLong_AsSsize_t(args[1]);
        if (start >= 0 && start <= PyBytes_GET_SIZE(args[0])) {
            Buf buf = {(const unsigned char *)PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0]), start};
            PyObject *datum = read_datum(p->program, &buf, 0);
            if (datum != NULL) {
                if (buf.i == buf.n)
                    return datum;
                /* Bytes after the datum: a value is exactly one event. The Python reader raises
                   TrailingBytes for them (a datum read whole, the buffer going on). */
                Py_DECREF(datum);
            }
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

/* ---- writing: an event's bytes ------------------------------------------------------------ */

/* The write program (built by _avro_writer._program): the read forms, and
 *   (INT,) a long within 32 bits; (ENUM, {symbol: index}); (OPTIONAL, T): ["null", T]
 * A record's fields are written in order; a `null` field writes nothing and reads nothing. */
enum { OP_INT = 13, OP_OPTIONAL = 14 };

typedef struct {
    char *p;
    Py_ssize_t len, cap;
    char small[512];
} Out;

static int
out_reserve(Out *o, Py_ssize_t more)
{
    if (o->len + more <= o->cap)
        return 0;
    Py_ssize_t cap = o->cap * 2;
    while (cap < o->len + more)
        cap *= 2;
    char *p = o->p == o->small ? PyMem_Malloc(cap) : PyMem_Realloc(o->p, cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (o->p == o->small)
        memcpy(p, o->small, o->len);
    o->p = p;
    o->cap = cap;
    return 0;
}

static int
out_write(Out *o, const void *data, Py_ssize_t n)
{
    if (out_reserve(o, n) < 0)
        return -1;
    memcpy(o->p + o->len, data, n);
    o->len += n;
    return 0;
}

static int
out_long(Out *o, long long v)
{
    unsigned long long z = ((unsigned long long)v << 1) ^ (unsigned long long)(v >> 63);
    unsigned char tmp[10];
    int k = 0;
    while (z >= 0x80) {
        tmp[k++] = (unsigned char)((z & 0x7F) | 0x80);
        z >>= 7;
    }
    tmp[k++] = (unsigned char)z;
    return out_write(o, tmp, k);
}

static void
out_free(Out *o)
{
    if (o->p != o->small)
        PyMem_Free(o->p);
}

#define W_REJECT 1 /* not the common path: the Python writer writes it */

/* An exact int within 64 bits into *v; 0, or W_REJECT. */
static int
exact_long(PyObject *x, long long *v)
{
    if (!PyLong_CheckExact(x))
        return W_REJECT;
    int overflow;
    *v = PyLong_AsLongLongAndOverflow(x, &overflow);
    if (overflow || (*v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return W_REJECT;
    }
    return 0;
}

static int
write_string(Out *o, PyObject *x)
{
    if (!PyUnicode_CheckExact(x))
        return W_REJECT;
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(x, &n);
    if (s == NULL) { /* a lone surrogate: the Python writer raises it */
        PyErr_Clear();
        return W_REJECT;
    }
    if (out_long(o, n) < 0 || out_write(o, s, n) < 0)
        return -1;
    return 0;
}

/* An exact float as a float (size 4) or a double (size 8); W_REJECT for anything else, and for a
   value beyond float32 (the Python writer writes its infinity). */
static int
write_real(Out *o, PyObject *x, Py_ssize_t size)
{
    if (!PyFloat_CheckExact(x))
        return W_REJECT;
    char buf[8];
    int rc = size == 4 ? PyFloat_Pack4(PyFloat_AS_DOUBLE(x), buf, 1) : PyFloat_Pack8(PyFloat_AS_DOUBLE(x), buf, 1);
    if (rc < 0) {
        PyErr_Clear();
        return W_REJECT;
    }
    return out_write(o, buf, size);
}

/* 0 written; W_REJECT (nothing to undo: the caller drops the whole output); -1 error set. */
static int
write_datum(PyObject *prog, PyObject *x, Out *o, int depth)
{
    if (depth > MAX_DEPTH)
        return W_REJECT;
    long op = PyLong_AsLong(PyTuple_GET_ITEM(prog, 0));
    long long v;
    int rc;
    switch (op) {
    case OP_NULL:
        return 0; /* as the Python writer: nothing, whatever the datum */
    case OP_BOOLEAN:
        if (!PyBool_Check(x))
            return W_REJECT;
        return out_write(o, x == Py_True ? "\x01" : "\x00", 1);
    case OP_INT:
        if ((rc = exact_long(x, &v)) != 0)
            return rc;
        if (v < -2147483648LL || v > 2147483647LL)
            return W_REJECT;
        return out_long(o, v);
    case OP_LONG:
        if ((rc = exact_long(x, &v)) != 0)
            return rc;
        return out_long(o, v);
    case OP_FLOAT:
        return write_real(o, x, 4);
    case OP_DOUBLE:
        return write_real(o, x, 8);
    case OP_STRING:
        return write_string(o, x);
    case OP_BYTES:
        if (!PyBytes_CheckExact(x))
            return W_REJECT;
        if (out_long(o, PyBytes_GET_SIZE(x)) < 0)
            return -1;
        return out_write(o, PyBytes_AS_STRING(x), PyBytes_GET_SIZE(x));
    case OP_FIXED:
        if (!PyBytes_CheckExact(x) || PyBytes_GET_SIZE(x) != PyLong_AsSsize_t(PyTuple_GET_ITEM(prog, 1)))
            return W_REJECT;
        return out_write(o, PyBytes_AS_STRING(x), PyBytes_GET_SIZE(x));
    case OP_ENUM: {
        if (!PyUnicode_CheckExact(x))
            return W_REJECT;
        PyObject *index = PyDict_GetItemWithError(PyTuple_GET_ITEM(prog, 1), x);
        if (index == NULL) {
            if (PyErr_Occurred())
                return -1;
            return W_REJECT;
        }
        return out_long(o, PyLong_AsLongLong(index));
    }
    case OP_OPTIONAL:
        if (x == Py_None)
            return out_write(o, "\x00", 1);
        if (out_write(o, "\x02", 1) < 0)
            return -1;
        return write_datum(PyTuple_GET_ITEM(prog, 1), x, o, depth + 1);
    case OP_ARRAY: {
        if (!PyList_CheckExact(x) && !PyTuple_CheckExact(x))
            return W_REJECT;
        PyObject *item = PyTuple_GET_ITEM(prog, 1);
        Py_ssize_t n = PySequence_Fast_GET_SIZE(x);
        if (n == 0)
            return out_write(o, "\x00", 1);
        if (out_long(o, n) < 0)
            return -1;
        for (Py_ssize_t k = 0; k < n; k++) {
            /* a list may change under a nested call: only C code runs here, but index safely */
            if (k >= PySequence_Fast_GET_SIZE(x))
                return W_REJECT;
            if ((rc = write_datum(item, PySequence_Fast_GET_ITEM(x, k), o, depth + 1)) != 0)
                return rc;
        }
        return out_write(o, "\x00", 1);
    }
    case OP_MAP: {
        if (!PyDict_CheckExact(x))
            return W_REJECT;
        PyObject *value = PyTuple_GET_ITEM(prog, 1), *k, *val;
        Py_ssize_t pos = 0, n = PyDict_GET_SIZE(x);
        if (n == 0)
            return out_write(o, "\x00", 1);
        if (out_long(o, n) < 0)
            return -1;
        while (PyDict_Next(x, &pos, &k, &val)) {
            if ((rc = write_string(o, k)) != 0)
                return rc;
            if ((rc = write_datum(value, val, o, depth + 1)) != 0)
                return rc;
        }
        return out_write(o, "\x00", 1);
    }
    case OP_RECORD: {
        if (!PyDict_CheckExact(x))
            return W_REJECT;
        PyObject *names = PyTuple_GET_ITEM(prog, 1), *fields = PyTuple_GET_ITEM(prog, 2);
        for (Py_ssize_t f = 0; f < PyTuple_GET_SIZE(fields); f++) {
            PyObject *fp = PyTuple_GET_ITEM(fields, f);
            if (PyLong_AsLong(PyTuple_GET_ITEM(fp, 0)) == OP_NULL)
                continue; /* nothing written, nothing read */
            PyObject *fx = PyDict_GetItemWithError(x, PyTuple_GET_ITEM(names, f));
            if (fx == NULL) {
                if (PyErr_Occurred())
                    return -1;
                return W_REJECT; /* missing: its default, or the Python writer's KeyError */
            }
            if ((rc = write_datum(fp, fx, o, depth + 1)) != 0)
                return rc;
        }
        return 0;
    }
    default:
        return W_REJECT;
    }
}

static int
valid_write_program(PyObject *prog, int depth)
{
    if (depth > MAX_DEPTH || !PyTuple_CheckExact(prog) || PyTuple_GET_SIZE(prog) < 1
        || !PyLong_CheckExact(PyTuple_GET_ITEM(prog, 0)))
        return 0;
    long op = PyLong_AsLong(PyTuple_GET_ITEM(prog, 0));
    Py_ssize_t n = PyTuple_GET_SIZE(prog);
    switch (op) {
    case OP_NULL: case OP_BOOLEAN: case OP_INT: case OP_LONG: case OP_FLOAT: case OP_DOUBLE: case OP_STRING:
    case OP_BYTES:
        return n == 1;
    case OP_FIXED:
        return n == 2 && PyLong_CheckExact(PyTuple_GET_ITEM(prog, 1));
    case OP_ENUM: {
        if (n != 2 || !PyDict_CheckExact(PyTuple_GET_ITEM(prog, 1)))
            return 0;
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(PyTuple_GET_ITEM(prog, 1), &pos, &k, &v))
            if (!PyLong_CheckExact(v))
                return 0;
        return 1;
    }
    case OP_OPTIONAL: case OP_ARRAY: case OP_MAP:
        return n == 2 && valid_write_program(PyTuple_GET_ITEM(prog, 1), depth + 1);
    case OP_RECORD: {
        if (n != 3 || !PyTuple_CheckExact(PyTuple_GET_ITEM(prog, 1)) || !PyTuple_CheckExact(PyTuple_GET_ITEM(prog, 2)))
            return 0;
        PyObject *names = PyTuple_GET_ITEM(prog, 1), *fields = PyTuple_GET_ITEM(prog, 2);
        if (PyTuple_GET_SIZE(names) != PyTuple_GET_SIZE(fields))
            return 0;
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(fields); k++)
            if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(names, k))
                || !valid_write_program(PyTuple_GET_ITEM(fields, k), depth + 1))
                return 0;
        return 1;
    }
    default:
        return 0;
    }
}

typedef struct {
    PyObject_HEAD
    PyObject *prefix;       /* bytes: magic + fingerprint */
    PyObject *type_version; /* bytes: the envelope's event_type and schema_version, encoded */
    PyObject *payload;      /* the payload record's write program, or None */
    PyObject *write_payload; /* the Python payload writer: write(payload) -> bytes */
    PyObject *fallback;     /* the Python encode_event */
} EventEncoder;

/* encode_event(event_id, run_id, agent, to, causes, payload) -> bytes: Encoder.encode_event. */
static PyObject *
EventEncoder_encode(EventEncoder *e, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6)
        return PyObject_Vectorcall(e->fallback, args, nargs, NULL);
    Out o = {.len = 0, .cap = sizeof(o.small)};
    o.p = o.small;
    PyObject *to = args[3], *causes = args[4], *payload = args[5];
    int rc = 0;
    if (out_write(&o, PyBytes_AS_STRING(e->prefix), PyBytes_GET_SIZE(e->prefix)) < 0)
        goto error;
    for (int k = 0; k < 3 && rc == 0; k++)
        rc = write_string(&o, args[k]);
    if (rc == 0)
        rc = out_write(&o, PyBytes_AS_STRING(e->type_version), PyBytes_GET_SIZE(e->type_version));
    if (rc == 0) {
        if (to == Py_None)
            rc = out_write(&o, "\x00", 1);
        else if ((rc = out_write(&o, "\x02", 1)) == 0)
            rc = write_string(&o, to);
    }
    if (rc == 0) {
        if (!PyTuple_CheckExact(causes) && !PyList_CheckExact(causes))
            rc = W_REJECT;
        else {
            Py_ssize_t n = PySequence_Fast_GET_SIZE(causes);
            if (n == 0)
                rc = out_write(&o, "\x00", 1);
            else {
                rc = out_long(&o, n);
                for (Py_ssize_t k = 0; k < n && rc == 0; k++) {
                    long long v;
                    rc = exact_long(PySequence_Fast_GET_ITEM(causes, k), &v);
                    if (rc == 0)
                        rc = out_long(&o, v);
                }
                if (rc == 0)
                    rc = out_write(&o, "\x00", 1);
            }
        }
    }
    if (rc < 0)
        goto error;
    if (rc == W_REJECT) { /* the envelope is not the common path: the Python encoder does it all */
        out_free(&o);
        return PyObject_Vectorcall(e->fallback, args, nargs, NULL);
    }
    Py_ssize_t envelope = o.len;
    rc = e->payload == Py_None ? W_REJECT : write_datum(e->payload, payload, &o, 0);
    if (rc < 0)
        goto error;
    if (rc == W_REJECT) { /* the payload by the Python writer: its bytes, or its error */
        o.len = envelope;
        PyObject *body = PyObject_CallOneArg(e->write_payload, payload);
        if (body == NULL)
            goto error;
        if (!PyBytes_Check(body)) {
            Py_DECREF(body);
            PyErr_SetString(PyExc_TypeError, "the payload writer returned no bytes");
            goto error;
        }
        rc = out_write(&o, PyBytes_AS_STRING(body), PyBytes_GET_SIZE(body));
        Py_DECREF(body);
        if (rc < 0)
            goto error;
    }
    PyObject *result = PyBytes_FromStringAndSize(o.p, o.len);
    out_free(&o);
    return result;
error:
    out_free(&o);
    return NULL;
}

static PyObject *
EventEncoder_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *prefix, *type_version, *payload, *write_payload, *fallback;
    static char *kwlist[] = {"prefix", "type_version", "payload", "write_payload", "fallback", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!OOO:EventEncoder", kwlist, &PyBytes_Type, &prefix,
                                     &PyBytes_Type, &type_version, &payload, &write_payload, &fallback))
        return NULL;
    if (payload != Py_None && !valid_write_program(payload, 0)) {
        PyErr_SetString(PyExc_ValueError, "EventEncoder: not a write program (see swarmlog.schema._avro_writer._program)");
        return NULL;
    }
    if (!PyCallable_Check(write_payload) || !PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "EventEncoder: write_payload and fallback are the Python writers");
        return NULL;
    }
    EventEncoder *e = (EventEncoder *)type->tp_alloc(type, 0);
    if (e == NULL)
        return NULL;
    e->prefix = Py_NewRef(prefix);
    e->type_version = Py_NewRef(type_version);
    e->payload = Py_NewRef(payload);
    e->write_payload = Py_NewRef(write_payload);
    e->fallback = Py_NewRef(fallback);
    return (PyObject *)e;
}

static int
EventEncoder_traverse(EventEncoder *e, visitproc visit, void *arg)
{
    Py_VISIT(e->payload);
    Py_VISIT(e->write_payload);
    Py_VISIT(e->fallback);
    return 0;
}

static int
EventEncoder_clear(EventEncoder *e)
{
    Py_CLEAR(e->prefix);
    Py_CLEAR(e->type_version);
    Py_CLEAR(e->payload);
    Py_CLEAR(e->write_payload);
    Py_CLEAR(e->fallback);
    return 0;
}

static void
EventEncoder_dealloc(EventEncoder *e)
{
    PyObject_GC_UnTrack(e);
    EventEncoder_clear(e);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

static PyMethodDef EventEncoder_methods[] = {
    {"encode_event", (PyCFunction)(void (*)(void))EventEncoder_encode, METH_FASTCALL,
     "encode_event(event_id, run_id, agent, to, causes, payload) -> bytes, as Encoder.encode_event."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject EventEncoderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "swarmlog.schema._avro_native.EventEncoder",
    .tp_doc = "EventEncoder(prefix, type_version, payload, write_payload, fallback): an event's bytes in C; the "
              "Python writers for what the C walk does not accept.",
    .tp_basicsize = sizeof(EventEncoder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = EventEncoder_new,
    .tp_dealloc = (destructor)EventEncoder_dealloc,
    .tp_traverse = (traverseproc)EventEncoder_traverse,
    .tp_clear = (inquiry)EventEncoder_clear,
    .tp_methods = EventEncoder_methods,
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
    if (PyType_Ready(&ProgramType) < 0 || PyType_Ready(&EventEncoderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Program", (PyObject *)&ProgramType) < 0
        || PyModule_AddObjectRef(m, "EventEncoder", (PyObject *)&EventEncoderType) < 0
        || PyModule_AddIntConstant(m, "INT", OP_INT) < 0 || PyModule_AddIntConstant(m, "OPTIONAL", OP_OPTIONAL) < 0) {
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
