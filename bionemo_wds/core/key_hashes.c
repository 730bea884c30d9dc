/* Keyed hashes in C (`seeds.keyed_hashes`): splitmix64(crc32(key) ^ salt) of each key of a list of str,
 * the hash every per-key draw of the loader starts from (a document's or window's strand, a masked-LM
 * row's salt). In numpy it is `key_crcs` (a `zlib.crc32` call a key) and then about a dozen array
 * operations; for the two dozen documents of a batch those calls cost more than the hashing (measured:
 * docs/benchmarks.md), so the loop is here. crc32 is zlib's (the reflected 0xEDB88320 polynomial, a
 * byte at a time: keys are a few dozen bytes), over each key's UTF-8 bytes as `str.encode` gives them;
 * splitmix64 is `seeds.splitmix64` (splitmix.h). tests/test_key_hashes.py compares both with the Python forms. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "splitmix.h"

static uint32_t crc_table[256];

static void make_crc_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t crc32_of(const unsigned char *p, Py_ssize_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (Py_ssize_t i = 0; i < n; i++)
        c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* keyed_hashes(keys, salt, out): out[i] = splitmix64(crc32(utf8(keys[i])) ^ salt), out a writable buffer of
 * len(keys) uint64. A key that is not a str, or has no UTF-8 form (a lone surrogate), raises as
 * `str.encode` would. */
static PyObject *keyed_hashes(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *keys;
    unsigned long long salt;
    Py_buffer out;
    if (!PyArg_ParseTuple(args, "OKw*", &keys, &salt, &out))
        return NULL;
    PyObject *result = NULL, *list = PySequence_Fast(keys, "keyed_hashes: keys must be a sequence of str");
    if (!list)
        goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(list);
    if (out.len != n * 8) {
        PyErr_SetString(PyExc_ValueError, "keyed_hashes: the output holds another number of hashes than keys");
        goto done;
    }
    uint64_t *hashes = out.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PySequence_Fast_GET_ITEM(list, i);
        if (!PyUnicode_Check(key)) {
            PyErr_Format(PyExc_TypeError, "keyed_hashes: key %zd is not a str", i);
            goto done;
        }
        Py_ssize_t size;
        const char *bytes = PyUnicode_AsUTF8AndSize(key, &size);
        if (!bytes)
            goto done;
        hashes[i] = splitmix64((uint64_t)crc32_of((const unsigned char *)bytes, size) ^ (uint64_t)salt);
    }
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(list);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"keyed_hashes", keyed_hashes, METH_VARARGS, "splitmix64(crc32(key) ^ salt) of each key, into a uint64 buffer."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "key_hashes", "Keyed hashes of the loader's draws (C).",
                                    -1, methods};

PyMODINIT_FUNC PyInit_key_hashes(void) {
    make_crc_table();
    return PyModule_Create(&module);
}
