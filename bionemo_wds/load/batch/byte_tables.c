/* Byte-table passes over a batch's uint8 bases, in place (`batch.byte_lookup`): the reverse
 * complement of flipped rows and the check for bases other than A/C/G/T. Python's `bytes.translate`
 * did both, at about nine instructions a byte and with three copies around it (the rows gathered
 * into bytes, translated into new bytes, written back); together they were a quarter of the
 * instructions of a byte batch (docs/benchmarks.md, 2026-12-07 evening). Here one pass, in place,
 * eight bytes a step. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

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

/* any_marked(buffer, table): whether some byte b of the buffer has table[b] != 0. */
static PyObject *any_marked(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer buf, table;
    if (!PyArg_ParseTuple(args, "y*y*", &buf, &table))
        return NULL;
    PyObject *result = NULL;
    if (table_of(&table)) {
        unsigned marked = 0;
        Py_BEGIN_ALLOW_THREADS
        const uint8_t *p = buf.buf, *t = table.buf;
        const Py_ssize_t n = buf.len;
        Py_ssize_t i = 0;
        for (; i + 8 <= n && !marked; i += 8) /* a batch of real bases has none: the whole pass, 8 at a time */
            marked = t[p[i]] | t[p[i + 1]] | t[p[i + 2]] | t[p[i + 3]] | t[p[i + 4]] | t[p[i + 5]] | t[p[i + 6]] |
                     t[p[i + 7]];
        for (; i < n && !marked; i++)
            marked = t[p[i]];
        Py_END_ALLOW_THREADS
        result = PyBool_FromLong(marked != 0);
    }
    PyBuffer_Release(&buf);
    PyBuffer_Release(&table);
    return result;
}

static PyMethodDef METHODS[] = {
    {"apply", apply, METH_VARARGS, "Replace every byte b of a writable buffer with table[b], in place."},
    {"any_marked", any_marked, METH_VARARGS, "Whether some byte b of a buffer has table[b] != 0."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "byte_tables", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_byte_tables(void) { return PyModule_Create(&MODULE); }
