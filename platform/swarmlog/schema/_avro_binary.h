/* Avro binary's two primitives as swarmlog's C modules read them (_route.c, _avro_native.c): the one
 * home, in C, of what swarmlog.schema._avro_reader.read_long and read_length do in Python.
 *
 * Stricter than the Python readers never; as strict: a varint of more than 10 bytes, or of a
 * value beyond 64 bits, is refused, and so is a length that is negative or runs past the end.
 * A refusal here is a C module's cue to hand the message to its Python path, which decides. */

#ifndef SWARMLOG_AVRO_BINARY_H
#define SWARMLOG_AVRO_BINARY_H

#include <Python.h>

/* The zigzag long at b[*i] (7 bits a byte, low first): 0, *out and *i past it; or -1 (*i untouched)
   if it runs past n, takes more than 10 bytes or is beyond 64 bits. */
static inline int
avro_read_long(const unsigned char *b, Py_ssize_t n, Py_ssize_t *i, long long *out)
{
    unsigned long long acc = 0;
    int shift = 0;
    Py_ssize_t j = *i;
    for (;;) {
        if (j >= n || shift > 63)
            return -1;
        unsigned char x = b[j++];
        if (shift == 63 && (x & 0x7E))
            return -1; /* beyond 64 bits */
        acc |= (unsigned long long)(x & 0x7F) << shift;
        if (x < 0x80)
            break;
        shift += 7;
    }
    *i = j;
    *out = (long long)(acc >> 1) ^ -(long long)(acc & 1);
    return 0;
}

/* A string's or bytes' length at b[*i]: 0, *len and *i at its first byte; or -1 if the length is
   malformed, negative, or runs past n. */
static inline int
avro_read_length(const unsigned char *b, Py_ssize_t n, Py_ssize_t *i, Py_ssize_t *len)
{
    long long l;
    Py_ssize_t j = *i;
    if (avro_read_long(b, n, &j, &l) < 0 || l < 0 || l > n - j)
        return -1;
    *i = j;
    *len = (Py_ssize_t)l;
    return 0;
}

#endif
