/* Byte-table passes over uint8 bases (`core.byte_lookup`): the reverse complement of flipped rows
 * (written reversed and complemented in one pass: `reverse_into`), a tokenizer's codes or ids of
 * bases (`translate_into`), both 32 bytes a step on AVX2 (byte_table.h), and the check for bases other
 * than A/C/G/T. Python's `bytes.translate` did these at about nine instructions a byte, with copies
 * around it (the rows gathered into bytes, translated into new bytes, written back); the complement
 * and the check were a quarter of the instructions of a byte batch (docs/benchmarks.md, 2026-12-07
 * evening). Here one pass each; a table applied in place (`apply`) eight bytes a step, the check by
 * vector compares against the few kept bytes. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "byte_table.h"
#include "vector_clones.h"

static int table_of(Py_buffer *table) {
    if (table->len != 256) {
        PyErr_Format(PyExc_ValueError, "a byte table holds 256 bytes, this one %zd", table->len);
        return 0;
    }
    return 1;
}

/* apply(buffer, table): every byte b of the writable buffer becomes table[b]. */
static PyObject *apply(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer buf, table;
    if (!PyArg_ParseTuple(args, "w*y*", &buf, &table))
        return NULL;
    PyObject *result = NULL;
    if (table_of(&table)) {
        Py_BEGIN_ALLOW_THREADS
        uint8_t *p = buf.buf;
        const uint8_t *t = table.buf;
        const Py_ssize_t n = buf.len;
        Py_ssize_t i = 0;
        for (; i + 8 <= n; i += 8) {
            uint8_t a = t[p[i]], b = t[p[i + 1]], c = t[p[i + 2]], d = t[p[i + 3]];
            uint8_t e = t[p[i + 4]], f = t[p[i + 5]], g = t[p[i + 6]], h = t[p[i + 7]];
            p[i] = a, p[i + 1] = b, p[i + 2] = c, p[i + 3] = d;
            p[i + 4] = e, p[i + 5] = f, p[i + 6] = g, p[i + 7] = h;
        }
        for (; i < n; i++)
            p[i] = t[p[i]];
        Py_END_ALLOW_THREADS
        result = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&buf);
    PyBuffer_Release(&table);
    return result;
}

/* The bytes of `in` through `table` into `out` (a writable buffer of at least as many bytes, not
 * overlapping it), backwards where `backward`. */
static PyObject *table_into(PyObject *args, int backward, const char *name) {
    Py_buffer out, in, table;
    if (!PyArg_ParseTuple(args, "w*y*y*", &out, &in, &table))
        return NULL;
    PyObject *result = NULL;
    if (!table_of(&table)) {
    } else if (out.len < in.len) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes do not fit in %zd", name, in.len, out.len);
    } else {
        Py_BEGIN_ALLOW_THREADS
        if (backward)
            table_backward(out.buf, in.buf, in.len, table.buf);
        else
            table_forward(out.buf, in.buf, in.len, table.buf);
        Py_END_ALLOW_THREADS
        result = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&out);
    PyBuffer_Release(&in);
    PyBuffer_Release(&table);
    return result;
}

/* reverse_into(out, buffer, table): out[j] = table[buffer[n - 1 - j]] for the n bytes of the buffer. */
static PyObject *reverse_into(PyObject *self, PyObject *args) {
    (void)self;
    return table_into(args, 1, "reverse_into");
}

/* translate_into(out, buffer, table): out[j] = table[buffer[j]] for the n bytes of the buffer. */
static PyObject *translate_into(PyObject *self, PyObject *args) {
    (void)self;
    return table_into(args, 0, "translate_into");
}

/* The x86-64 build also carries an AVX2 copy of `outside` (vector_clones.h: 32 bytes a compare instead
 * of SSE2's 16); other machines compile the plain loop. */

typedef uint8_t bytes32 __attribute__((vector_size(32)));
typedef int8_t flags32 __attribute__((vector_size(32)));

/* Whether some byte of p[0 .. n) is none of kept[0 .. n_kept) (n_kept <= 32): 64 bytes at a time,
 * each compared with every kept byte (a set of a few bytes, as the A/C/G/T check's: no table lookup
 * per byte), the kept bytes broadcast once. */
VECTOR_CLONES static int outside(const uint8_t *p, Py_ssize_t n, const uint8_t *kept, int n_kept) {
    bytes32 each[32];
    for (int k = 0; k < n_kept; k++)
        each[k] = (bytes32){0} + kept[k];
    Py_ssize_t i = 0;
    for (; i + 64 <= n; i += 64) {
        bytes32 x, y;
        memcpy(&x, p + i, 32);
        memcpy(&y, p + i + 32, 32);
        flags32 in_x = {0}, in_y = {0};
        for (int k = 0; k < n_kept; k++) {
            in_x |= (flags32)(x == each[k]);
            in_y |= (flags32)(y == each[k]);
        }
        uint64_t lanes[4];
        flags32 both = in_x & in_y;
        memcpy(lanes, &both, 32);
        if ((lanes[0] & lanes[1] & lanes[2] & lanes[3]) != UINT64_MAX)
            return 1;
    }
    for (; i < n; i++) {
        int found = 0;
        for (int k = 0; k < n_kept; k++)
            found |= p[i] == kept[k];
        if (!found)
            return 1;
    }
    return 0;
}

/* any_outside(buffer, kept): whether some byte of the buffer is not one of the bytes of `kept`
 * (at most 32 of them). */
static PyObject *any_outside(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer buf, kept;
    if (!PyArg_ParseTuple(args, "y*y*", &buf, &kept))
        return NULL;
    PyObject *result = NULL;
    if (kept.len > 32) {
        PyErr_Format(PyExc_ValueError, "any_outside takes at most 32 kept bytes, not %zd", kept.len);
    } else {
        int found;
        Py_BEGIN_ALLOW_THREADS
        found = outside(buf.buf, buf.len, kept.buf, (int)kept.len);
        Py_END_ALLOW_THREADS
        result = PyBool_FromLong(found);
    }
    PyBuffer_Release(&buf);
    PyBuffer_Release(&kept);
    return result;
}

static PyMethodDef METHODS[] = {
    {"apply", apply, METH_VARARGS, "Replace every byte b of a writable buffer with table[b], in place."},
    {"reverse_into", reverse_into, METH_VARARGS, "Write a buffer's bytes backwards through a table into another."},
    {"translate_into", translate_into, METH_VARARGS, "Write a buffer's bytes through a table into another."},
    {"any_outside", any_outside, METH_VARARGS, "Whether some byte of a buffer is not one of the kept bytes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "byte_tables", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_byte_tables(void) { return PyModule_Create(&MODULE); }
