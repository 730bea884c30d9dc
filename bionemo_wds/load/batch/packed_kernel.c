/* Packed rows of bytes in C (`packed_native`): a batch's documents written into its token matrix
 * and its document columns (`lay_out`, for `packed_layout.lay_out`: one call a batch instead of a Python
 * step a document and a slice copy a piece), and
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

/* Document d written into the flat token matrix `out` (PAD or not yet written) from its BOS column a:
 * BOS, its tag (a bytes object of p - 2 bytes, when its prefix p > 1), SEP (when p > 1), its bases, EOS
 * at a + s - 1. The bases: pieces[p0 .. p1) (1-D uint8 buffers) in order, or, where `flip`, the last
 * piece first, each read backwards through the 256-byte `table`. A piece or tag that disagrees with the
 * document's columns is a ValueError (-1), never a write outside them. */
static int place_document(uint8_t *out, Py_ssize_t d, int64_t a, int64_t p, int64_t s, PyObject *tag,
                          PyObject *piece_list, int64_t p0, int64_t p1, int flip, const uint8_t *table) {
    out[a] = 2;         /* BOS: core.tokenizer.BOS_ID */
    out[a + s - 1] = 0; /* EOS */
    if (p > 1) {
        if (!PyBytes_Check(tag) || PyBytes_GET_SIZE(tag) != p - 2) {
            PyErr_Format(PyExc_ValueError, "lay_out: document %zd's tag is not %lld bytes", d, (long long)(p - 2));
            return -1;
        }
        memcpy(out + a + 1, PyBytes_AS_STRING(tag), (size_t)(p - 2));
        out[a + p - 1] = 3; /* SEP */
    }
    int64_t col = a + p, end = a + s - 1;
    for (int64_t i = 0; i < p1 - p0; i++) {
        Py_ssize_t q = flip ? (Py_ssize_t)(p1 - 1 - i) : (Py_ssize_t)(p0 + i);
        Py_buffer piece;
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(piece_list, q), &piece, PyBUF_SIMPLE) < 0)
            return -1;
        if (col + piece.len > end) {
            PyBuffer_Release(&piece);
            PyErr_Format(PyExc_ValueError, "lay_out: document %zd's pieces hold more bases than its length", d);
            return -1;
        }
        if (flip)
            table_backward(out + col, piece.buf, piece.len, table);
        else
            memcpy(out + col, piece.buf, (size_t)piece.len);
        col += piece.len;
        PyBuffer_Release(&piece);
    }
    if (col != end) {
        PyErr_Format(PyExc_ValueError, "lay_out: document %zd's pieces hold fewer bases than its length", d);
        return -1;
    }
    return 0;
}

/* lay_out(tokens, rows, lengths, prefix, flips, tags, pieces, first_piece, complement, doc_tokens,
 * doc_prefix, doc_rc, row_fields) -> width: a packed batch's k documents laid out in its n x seq_length
 * uint8 `tokens` (`packed_layout.lay_out`): document d (int64 columns rows, lengths, prefix; uint8 flips;
 * tags[d]; pieces[first_piece[d] .. first_piece[d + 1])) goes after the documents before it in its row
 * (a row's documents are consecutive), BOS, tag, SEP, bases, EOS (`place_document`), and what is left of
 * each row is PAD. The document columns are written n x width (width: the most documents of a row, at
 * least 1) into the first n * width cells of doc_tokens / doc_prefix (int32: tokens, tokens before the
 * first base) and doc_rc (uint8), the rest of those n * width cells zero; row_fields (int64, n x 3): each
 * row's bases, its first document and the one past its last (-1, 0 for a row without documents).
 * Returns -(d + 1) when document d does not fit its row (the caller names it). */
static PyObject *lay_out(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer tokens, rows_b, lengths_b, prefix_b, flips_b, first_b, complement, cols_t, cols_p, cols_rc, fields_b;
    PyObject *tags, *pieces;
    if (!PyArg_ParseTuple(args, "w*y*y*y*y*OOy*y*w*w*w*w*", &tokens, &rows_b, &lengths_b, &prefix_b, &flips_b, &tags,
                          &pieces, &first_b, &complement, &cols_t, &cols_p, &cols_rc, &fields_b))
        return NULL;
    PyObject *result = NULL, *tag_list = NULL, *piece_list = NULL;
    Py_ssize_t k = rows_b.len / 8, n = fields_b.len / 24;
    Py_ssize_t seq_length = n > 0 ? tokens.len / n : 0;
    Py_ssize_t cells = n * (k > 0 ? k : 1);
    if (lengths_b.len < k * 8 || prefix_b.len < k * 8 || flips_b.len < k || first_b.len < (k + 1) * 8 ||
        complement.len != 256 || tokens.len != n * seq_length || cols_t.len < cells * 4 || cols_p.len < cells * 4 ||
        cols_rc.len < cells) {
        PyErr_SetString(PyExc_ValueError, "lay_out: the document and row columns disagree in length");
        goto done;
    }
    tag_list = PySequence_Fast(tags, "lay_out: tags must be a sequence of bytes");
    piece_list = PySequence_Fast(pieces, "lay_out: pieces must be a sequence of buffers");
    if (!tag_list || !piece_list)
        goto done;
    if (PySequence_Fast_GET_SIZE(tag_list) < k) {
        PyErr_SetString(PyExc_ValueError, "lay_out: fewer tags than documents");
        goto done;
    }
    uint8_t *out = tokens.buf, *rc = cols_rc.buf;
    const int64_t *row = rows_b.buf, *length = lengths_b.buf, *head = prefix_b.buf, *piece_at = first_b.buf;
    const uint8_t *flip = flips_b.buf, *table = complement.buf;
    int32_t *doc_tokens = cols_t.buf, *doc_prefix = cols_p.buf;
    int64_t *fields = fields_b.buf; /* per row: bases, first, past */
    Py_ssize_t n_pieces = PySequence_Fast_GET_SIZE(piece_list);
    for (Py_ssize_t i = 0; i < n; i++) {
        fields[3 * i] = 0;
        fields[3 * i + 1] = -1;
        fields[3 * i + 2] = 0;
    }
    int64_t width = 1;
    for (Py_ssize_t d = 0; d < k; d++) { /* where each document goes: the columns after its row's last */
        int64_t i = row[d], p = head[d], p0 = piece_at[d], p1 = piece_at[d + 1];
        if (i < 0 || i >= n || p < 1 || length[d] < 0 || p0 < 0 || p1 < p0 || p1 > n_pieces) {
            PyErr_Format(PyExc_ValueError, "lay_out: document %zd's row, prefix or pieces fall outside the batch", d);
            goto done;
        }
        int64_t *f = fields + 3 * i;
        if (f[1] < 0)
            f[1] = d;
        else if (f[2] != d) {
            PyErr_Format(PyExc_ValueError, "lay_out: document %zd is not next to its row's other documents", d);
            goto done;
        }
        f[2] = d + 1;
        if (d - f[1] + 1 > width)
            width = d - f[1] + 1;
    }
    memset(doc_tokens, 0, (size_t)(n * width) * 4);
    memset(doc_prefix, 0, (size_t)(n * width) * 4);
    memset(rc, 0, (size_t)(n * width));
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t *f = fields + 3 * i, used = 0, bases = 0;
        for (int64_t d = f[1]; d >= 0 && d < f[2]; d++) {
            int64_t p = head[d], s = p + length[d] + 1, column = d - f[1];
            if (used + s > seq_length) {
                result = PyLong_FromSsize_t(-(Py_ssize_t)d - 1);
                goto done;
            }
            if (place_document(out + i * seq_length, (Py_ssize_t)d, used, p, s, PySequence_Fast_GET_ITEM(tag_list, d),
                               piece_list, piece_at[d], piece_at[d + 1], flip[d] != 0, table) < 0)
                goto done;
            doc_tokens[i * width + column] = (int32_t)s;
            doc_prefix[i * width + column] = (int32_t)p;
            rc[i * width + column] = flip[d] != 0;
            used += s;
            bases += length[d];
        }
        memset(out + i * seq_length + used, PAD, (size_t)(seq_length - used));
        f[0] = bases;
    }
    result = PyLong_FromLongLong(width);
done:
    Py_XDECREF(tag_list);
    Py_XDECREF(piece_list);
    PyBuffer_Release(&tokens);
    PyBuffer_Release(&rows_b);
    PyBuffer_Release(&lengths_b);
    PyBuffer_Release(&prefix_b);
    PyBuffer_Release(&flips_b);
    PyBuffer_Release(&first_b);
    PyBuffer_Release(&complement);
    PyBuffer_Release(&cols_t);
    PyBuffer_Release(&cols_p);
    PyBuffer_Release(&cols_rc);
    PyBuffer_Release(&fields_b);
    return result;
}

static PyMethodDef methods[] = {
    {"packed_inputs", packed_inputs, METH_VARARGS, "Packed rows of bytes to Megatron's model inputs, one pass."},
    {"lay_out", lay_out, METH_VARARGS, "A packed batch's documents laid out in its token matrix and columns."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "packed_kernel",
                                    "Packed rows to model inputs in one pass (C).", -1, methods};

PyMODINIT_FUNC PyInit_packed_kernel(void) { return PyModule_Create(&module); }
