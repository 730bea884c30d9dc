/* Packed rows of bytes in C (`packed_native`): a batch's documents written into its token matrix
 * (`place`, for `packed_layout.lay_out`: one call a batch instead of Python slice copies a piece), and
 * the rows expanded to Megatron's model inputs in one pass (`packed_inputs`, for
 * `packed.packed_inputs_cpu`).
 *
 * The expansion is hand-written because numpy needs a pass per output and several temporaries (the
 * uint8 shift, the trained-label table pass and its float cast, the positions joined from runs, the tag
 * columns cleared by index) for what is one loop over each document's columns here. The result is the numpy path's,
 * cell for cell (tests/test_packed_kernel.py compares them): for a document of s tokens whose first
 * base is at its column p (BOS, tag, SEP before it) starting at column `col` of its row, column
 * col + j (0 <= j < s) holds
 *
 *   tokens = the byte there; position = j; label = the next byte (j < s - 1), else PAD;
 *   loss = 0 for a label that is a tag byte or the SEP before it (j <= p - 3), else whether the label
 *          is trained: `real` 1, an A, C, G or T of either case; `real` 0, any byte above UNK (4);
 *
 * and each padding column after a row's last document: tokens = its byte, position = 0, 1, ... from
 * the first padding column, label = PAD, loss = 0 (PAD is not trained). These are
 * `labels.TRAINED_TABLES` (the tests check every byte). Buffers come from numpy through the buffer
 * protocol; the GIL is released while laying.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "byte_table.h"    /* flipped pieces, 32 bytes a step on AVX2 */
#include "vector_clones.h" /* an AVX2 copy of the column loops */

#define PAD 1 /* core.tokenizer.PAD_ID */


/* Whether label byte b (an int32) is trained, 0 or 1: `real`, an A/C/G/T of either case (a sum of
 * compares, which the compiler vectorises: with `|` between them it branches); else any byte above UNK. */
#define TRAINED(b, real)                                                                                               \
    ((real) ? (((b) | 0x20) == 'a') + (((b) | 0x20) == 'c') + (((b) | 0x20) == 'g') + (((b) | 0x20) == 't')          \
            : (b) > 4)

/* One run of columns: tokens widened, positions from `first`, labels the next byte, then their loss in a
 * loop of its own (two loops the compiler vectorises: one that mixes the bytes' compares with the
 * int64 stores stays scalar, at about three times the instructions). */
VECTOR_CLONES static void run_columns(const uint8_t *restrict raw, Py_ssize_t n, int64_t first, int real,
                                      int64_t *restrict tokens, int64_t *restrict labels, float *restrict loss,
                                      int64_t *restrict positions) {
    for (Py_ssize_t j = 0; j < n; j++) {
        tokens[j] = raw[j];
        positions[j] = first + j;
        labels[j] = raw[j + 1];
    }
    if (real) {
        for (Py_ssize_t j = 0; j < n; j++)
            loss[j] = (float)TRAINED((int32_t)raw[j + 1], 1);
    } else {
        for (Py_ssize_t j = 0; j < n; j++)
            loss[j] = (float)TRAINED((int32_t)raw[j + 1], 0);
    }
}

/* packed_inputs(raw, sizes, prefix, rows, seq_length, width, real, tokens, labels, loss_mask,
 * position_ids): raw uint8 rows x seq_length; sizes and prefix int64 rows x width (each document's tokens
 * and its tokens before its first base; a size of 0: no document); real: the label rule (1: only A/C/G/T
 * of either case is trained, degenerate bases masked; 0: any byte above UNK); the outputs int64
 * (tokens, labels, position_ids) and float32 (loss_mask), rows x seq_length, written whole. None, or a
 * ValueError naming the row whose documents do not fit. */
static PyObject *packed_inputs(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer raw, sizes, prefix, tokens, labels, loss, positions;
    Py_ssize_t rows, seq_length, width;
    int real;
    if (!PyArg_ParseTuple(args, "y*y*y*nnnpw*w*w*w*", &raw, &sizes, &prefix, &rows, &seq_length, &width, &real,
                          &tokens, &labels, &loss, &positions))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t cells = rows * seq_length, bad = -1;
    struct {
        Py_buffer *b;
        Py_ssize_t want;
        const char *name;
    } checks[] = {{&raw, cells, "tokens"},          {&sizes, rows * width * 8, "doc_tokens"},
                  {&prefix, rows * width * 8, "doc_prefix"}, {&tokens, cells * 8, "tokens out"},
                  {&labels, cells * 8, "labels"},     {&loss, cells * 4, "loss_mask"},
                  {&positions, cells * 8, "position_ids"}};
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
        if (checks[i].b->len < checks[i].want) {
            PyErr_Format(PyExc_ValueError, "%s holds %zd bytes, %zd needed", checks[i].name, checks[i].b->len,
                         checks[i].want);
            goto done;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    const uint8_t *byte = raw.buf;
    const int64_t *size = sizes.buf, *head = prefix.buf;
    int64_t *token = tokens.buf, *label = labels.buf, *position = positions.buf;
    float *lost = loss.buf;
    for (Py_ssize_t r = 0; r < rows && bad < 0; r++) {
        Py_ssize_t row = r * seq_length, col = 0;
        for (Py_ssize_t w = 0; w < width; w++) {
            int64_t s = size[r * width + w], p = head[r * width + w];
            if (s <= 0)
                continue;
            if (s > seq_length - col) {
                bad = r;
                break;
            }
            Py_ssize_t c = row + col, tag = p - 2 < 0 ? 0 : (p - 2 < s - 1 ? p - 2 : s - 1);
            /* all but the last column: the label is the next byte; then the tag columns' loss cleared */
            run_columns(byte + c, s - 1, 0, real, token + c, label + c, lost + c, position + c);
            memset(lost + c, 0, (size_t)tag * sizeof(float));
            token[c + s - 1] = byte[c + s - 1]; /* the document's last token (its EOS): no next token */
            position[c + s - 1] = s - 1;
            label[c + s - 1] = PAD;
            lost[c + s - 1] = 0; /* PAD is not trained */
            col += s;
        }
        if (bad >= 0)
            break;
        for (Py_ssize_t c = row + col, j = 0; c < row + seq_length; c++, j++) { /* the padding */
            token[c] = byte[c];
            position[c] = j;
            label[c] = PAD;
            lost[c] = 0;
        }
    }
    Py_END_ALLOW_THREADS
    if (bad >= 0)
        PyErr_Format(PyExc_ValueError, "packed sample %zd: its documents take more than %zd tokens", bad, seq_length);
    else
        result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&raw);
    PyBuffer_Release(&sizes);
    PyBuffer_Release(&prefix);
    PyBuffer_Release(&tokens);
    PyBuffer_Release(&labels);
    PyBuffer_Release(&loss);
    PyBuffer_Release(&positions);
    return result;
}

/* place(flat, doc_at, prefix, sizes, flips, tags, pieces, first_piece, complement): each document d of a
 * packed batch written into the uint8 token matrix `flat` (rows x seq_length, PAD already) from its BOS
 * column doc_at[d]: BOS, its tag (tags[d], a bytes object, when prefix[d] > 1), SEP (when prefix[d] > 1),
 * its bases, EOS at doc_at[d] + sizes[d] - 1. The bases: pieces[first_piece[d] .. first_piece[d + 1])
 * (1-D uint8 buffers) in order, or, where flips[d], the last piece first, each read backwards through the
 * 256-byte `complement` table. The caller has placed the documents (`packed_layout.lay_out`); a piece,
 * tag or column that disagrees with them is a ValueError, never a write outside `flat`. */
static PyObject *place(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer flat, at, prefix, sizes, flips, first_piece, complement;
    PyObject *tags, *pieces;
    if (!PyArg_ParseTuple(args, "w*y*y*y*y*OOy*y*", &flat, &at, &prefix, &sizes, &flips, &tags, &pieces, &first_piece,
                          &complement))
        return NULL;
    PyObject *result = NULL, *tag_list = NULL, *piece_list = NULL;
    Py_ssize_t k = at.len / 8;
    if (prefix.len < k * 8 || sizes.len < k * 8 || flips.len < k || first_piece.len < (k + 1) * 8 ||
        complement.len != 256) {
        PyErr_SetString(PyExc_ValueError, "place: the document columns disagree in length, or the table is not 256");
        goto done;
    }
    tag_list = PySequence_Fast(tags, "place: tags must be a sequence of bytes");
    piece_list = PySequence_Fast(pieces, "place: pieces must be a sequence of buffers");
    if (!tag_list || !piece_list)
        goto done;
    if (PySequence_Fast_GET_SIZE(tag_list) < k) {
        PyErr_SetString(PyExc_ValueError, "place: fewer tags than documents");
        goto done;
    }
    uint8_t *out = flat.buf;
    const int64_t *doc_at = at.buf, *head = prefix.buf, *size = sizes.buf, *piece_at = first_piece.buf;
    const uint8_t *flip = flips.buf, *table = complement.buf;
    Py_ssize_t n_pieces = PySequence_Fast_GET_SIZE(piece_list);
    for (Py_ssize_t d = 0; d < k; d++) {
        int64_t a = doc_at[d], p = head[d], s = size[d], p0 = piece_at[d], p1 = piece_at[d + 1];
        if (a < 0 || p < 1 || s < p + 1 || a + s > flat.len || p0 < 0 || p1 < p0 || p1 > n_pieces) {
            PyErr_Format(PyExc_ValueError, "place: document %zd's columns fall outside the batch", d);
            goto done;
        }
        out[a] = 2;         /* BOS: core.tokenizer.BOS_ID */
        out[a + s - 1] = 0; /* EOS */
        if (p > 1) {
            PyObject *tag = PySequence_Fast_GET_ITEM(tag_list, d);
            if (!PyBytes_Check(tag) || PyBytes_GET_SIZE(tag) != p - 2) {
                PyErr_Format(PyExc_ValueError, "place: document %zd's tag is not %lld bytes", d, (long long)(p - 2));
                goto done;
            }
            memcpy(out + a + 1, PyBytes_AS_STRING(tag), (size_t)(p - 2));
            out[a + p - 1] = 3; /* SEP */
        }
        int64_t col = a + p, end = a + s - 1;
        for (int64_t i = 0; i < p1 - p0; i++) {
            Py_ssize_t q = flip[d] ? (Py_ssize_t)(p1 - 1 - i) : (Py_ssize_t)(p0 + i);
            Py_buffer piece;
            if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(piece_list, q), &piece, PyBUF_SIMPLE) < 0)
                goto done;
            if (col + piece.len > end) {
                PyBuffer_Release(&piece);
                PyErr_Format(PyExc_ValueError, "place: document %zd's pieces hold more bases than its columns", d);
                goto done;
            }
            const uint8_t *in = piece.buf;
            if (flip[d])
                table_backward(out + col, in, piece.len, table);
            else
                memcpy(out + col, in, (size_t)piece.len);
            col += piece.len;
            PyBuffer_Release(&piece);
        }
        if (col != end) {
            PyErr_Format(PyExc_ValueError, "place: document %zd's pieces hold fewer bases than its columns", d);
            goto done;
        }
    }
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(tag_list);
    Py_XDECREF(piece_list);
    PyBuffer_Release(&flat);
    PyBuffer_Release(&at);
    PyBuffer_Release(&prefix);
    PyBuffer_Release(&sizes);
    PyBuffer_Release(&flips);
    PyBuffer_Release(&first_piece);
    PyBuffer_Release(&complement);
    return result;
}

static PyMethodDef methods[] = {
    {"packed_inputs", packed_inputs, METH_VARARGS, "Packed rows of bytes to Megatron's model inputs, one pass."},
    {"place", place, METH_VARARGS, "A packed batch's documents written into its token matrix."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "packed_kernel",
                                    "Packed rows to model inputs in one pass (C).", -1, methods};

PyMODINIT_FUNC PyInit_packed_kernel(void) { return PyModule_Create(&module); }
