/* Masked-LM draws laid over a batch's model inputs, one pass per batch (`batch.mlm`, `mlm_windows`,
 * `mlm_tokens`; the draws themselves: mlm_kernel.c).
 *
 * Hand-written because numpy needs several whole-batch passes (a where for the labels, boolean
 * indexing, casts) for what is one vectorised loop here. Every loop writes each cell once with no
 * branch that depends on the draws. Buffers come from numpy through the buffer protocol; the GIL is
 * released while laying.
 */
#include "mlm_common.h"

/* n int64 cells of `value` from `at` (a loop the compiler vectorises). */
VECTOR_CLONES static void fill_int64(int64_t *restrict at, Py_ssize_t n, int64_t value) {
    for (Py_ssize_t i = 0; i < n; i++)
        at[i] = value;
}

/* n labels of -100 from `at`. */
static inline void fill_ignore(int64_t *at, Py_ssize_t n) { fill_int64(at, n, IGNORE_INDEX); }

/* Megatron's labels of n columns: the label where trained (not -100), else the token itself (a loop the
 * compiler vectorises). */
VECTOR_CLONES static void unmask(int64_t *restrict out, const int64_t *restrict labels, const int64_t *restrict ids,
                                 Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t trained = -(int64_t)(labels[i] != IGNORE_INDEX);
        out[i] = (labels[i] & trained) | (ids[i] & ~trained);
    }
}

/* One row laid: code j lies over token column start + j. Every cell of the row is written once,
 * without a branch that depends on the draws (a loop the compiler vectorises): predicted = drawn and
 * trained; the id shown where predicted and the code is an id; `weight` NULL: the label kept where
 * predicted, -100 elsewhere; else the loss mask 1 where predicted, 0 elsewhere, labels left alone. */
#define LAY_ROW(T)                                                                                                     \
    VECTOR_CLONES static Py_ssize_t lay_row_##T(int64_t *restrict ids, int64_t *restrict labels,                   \
                                                float *restrict weight, int64_t *restrict unmasked,                 \
                                                const T *restrict codes, Py_ssize_t length, Py_ssize_t start,       \
                                                Py_ssize_t width) {                                                 \
        Py_ssize_t lo = start < 0 ? 0 : (start < length ? start : length);                                          \
        Py_ssize_t hi = start + width < lo ? lo : (start + width < length ? start + width : length);               \
        int64_t predicted = 0;                                                                                         \
        const T *drawn = codes - start; /* drawn[col]: the code over column col, for lo <= col < hi */             \
        if (weight) {                                                                                                  \
            unmask(unmasked, labels, ids, lo);                                                                         \
            for (Py_ssize_t col = lo; col < hi; col++) {                                                             \
                int64_t code = drawn[col], label = labels[col], id = ids[col];                                        \
                int64_t trained = -(int64_t)(label != IGNORE_INDEX);                                                  \
                int64_t hit = trained & -(int64_t)(code != MLM_NONE);                                                 \
                int64_t show = hit & -(int64_t)(code >= 0);                                                           \
                unmasked[col] = (label & trained) | (id & ~trained);                                                  \
                ids[col] = (code & show) | (id & ~show);                                                              \
                weight[col] = (float)(int32_t)(hit & 1); /* through int32: AVX2 converts no int64 to float */        \
                predicted -= hit;                                                                                      \
            }                                                                                                          \
            unmask(unmasked + hi, labels + hi, ids + hi, length - hi);                                                \
            return predicted;                                                                                          \
        }                                                                                                              \
        fill_ignore(labels, lo);                                                                                       \
        for (Py_ssize_t col = lo; col < hi; col++) {                                                                 \
            int64_t code = drawn[col], label = labels[col];                                                           \
            int64_t hit = -(int64_t)((code != MLM_NONE) & (label != IGNORE_INDEX));                                  \
            int64_t show = hit & -(int64_t)(code >= 0);                                                               \
            ids[col] = (code & show) | (ids[col] & ~show);                                                            \
            labels[col] = (label & hit) | (IGNORE_INDEX & ~hit);                                                      \
            predicted -= hit;                                                                                          \
        }                                                                                                              \
        fill_ignore(labels + hi, length - hi);                                                                         \
        return predicted;                                                                                              \
    }
LAY_ROW(int8_t)
LAY_ROW(int16_t)
LAY_ROW(int32_t)
LAY_ROW(int64_t)

/* lay(ids, labels, codes, code_size, starts, rows, seq_length, width, loss_mask, unmasked): the chosen
 * cells of `codes` laid over int64 `ids` and `labels` (rows x seq_length) in place; code column j of row
 * r is token column starts[r] + j. A cell is predicted when chosen and its label is not IGNORE_INDEX.
 * loss_mask (float32, rows x seq_length; an empty buffer: none): Megatron's batch, the loss mask 1 where
 * predicted and 0 elsewhere, labels left as they are, and `unmasked` (int64, rows x seq_length) written
 * whole: the label where trained, else the token before masking; else labels become IGNORE_INDEX
 * where not predicted. Returns the number predicted. */
static PyObject *lay(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer ids, labels, codes, starts, loss, unmasked;
    int code_size;
    Py_ssize_t rows, seq_length, width;
    if (!PyArg_ParseTuple(args, "w*w*y*iy*nnnw*w*", &ids, &labels, &codes, &code_size, &starts, &rows, &seq_length,
                          &width, &loss, &unmasked))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t predicted = 0;
    int megatron = loss.len > 0;
    if (!sized(&ids, rows * seq_length * 8, "ids") || !sized(&labels, rows * seq_length * 8, "labels") ||
        !sized(&codes, rows * width * code_size, "codes") || !sized(&starts, rows * 8, "starts") ||
        (megatron && !sized(&loss, rows * seq_length * 4, "loss_mask")) ||
        (megatron && !sized(&unmasked, rows * seq_length * 8, "unmasked")))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    const Py_ssize_t n_rows = rows, length = seq_length, n_codes = width;
    int64_t *id = ids.buf, *label = labels.buf;
    const int64_t *first = starts.buf;
    const char *code = codes.buf;
    float *weight = megatron ? loss.buf : NULL;
    int64_t *plain = megatron ? unmasked.buf : NULL;
    for (Py_ssize_t r = 0; r < n_rows; r++) {
        int64_t *row_ids = id + r * length, *row_labels = label + r * length;
        float *row_weight = weight ? weight + r * length : NULL;
        int64_t *row_plain = plain ? plain + r * length : NULL;
        const char *row_codes = code + r * n_codes * code_size;
        Py_ssize_t start = (Py_ssize_t)first[r];
        switch (code_size) {
        case 1:
            predicted += lay_row_int8_t(row_ids, row_labels, row_weight, row_plain, (const int8_t *)row_codes, length,
                                        start, n_codes);
            break;
        case 2:
            predicted += lay_row_int16_t(row_ids, row_labels, row_weight, row_plain, (const int16_t *)row_codes, length,
                                         start, n_codes);
            break;
        case 4:
            predicted += lay_row_int32_t(row_ids, row_labels, row_weight, row_plain, (const int32_t *)row_codes, length,
                                         start, n_codes);
            break;
        default:
            predicted += lay_row_int64_t(row_ids, row_labels, row_weight, row_plain, (const int64_t *)row_codes, length,
                                         start, n_codes);
            break;
        }
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(predicted);
done:
    PyBuffer_Release(&ids);
    PyBuffer_Release(&labels);
    PyBuffer_Release(&codes);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&loss);
    PyBuffer_Release(&unmasked);
    return result;
}

/* One window row's hf ids and labels with its masked-LM codes, in one pass over its base columns: the
 * row's bases lie at token columns p .. p + n; a base j is predicted when drawn (code != MLM_NONE) and
 * trained (not `dropped`): its label is label_bases[j] and, where the code is an id, the model sees
 * that id; every other label is -100. No branch that depends on the draws (the loop is vectorised);
 * the two loops differ only in where `trained` comes from (a whole-row constant when nothing is
 * dropped), as in `LAY_WINDOW_MEGATRON`. */
#define HF_CELL(TRAINED)                                                                                               \
    int64_t code = codes[j];                                                                                           \
    int64_t hit = (TRAINED) & -(int64_t)(code != MLM_NONE);                                                           \
    int64_t show = hit & -(int64_t)(code >= 0);                                                                       \
    labels[j] = ((int64_t)label_bases[j] & hit) | (IGNORE_INDEX & ~hit);                                              \
    ids[j] = (code & show) | (ids[j] & ~show);                                                                        \
    predicted -= hit;
#define LAY_WINDOW(T)                                                                                                  \
    VECTOR_CLONES static Py_ssize_t lay_window_##T(int64_t *restrict ids, int64_t *restrict labels,                \
                                                   const uint8_t *restrict label_bases, const T *restrict codes,    \
                                                   const uint8_t *restrict dropped, Py_ssize_t n) {                \
        Py_ssize_t predicted = 0;                                                                                      \
        if (dropped) {                                                                                                 \
            for (Py_ssize_t j = 0; j < n; j++) {                                                                       \
                HF_CELL(-(int64_t)(dropped[j] == 0))                                                                   \
            }                                                                                                          \
        } else {                                                                                                       \
            for (Py_ssize_t j = 0; j < n; j++) {                                                                       \
                HF_CELL(-1)                                                                                            \
            }                                                                                                          \
        }                                                                                                              \
        return predicted;                                                                                              \
    }
LAY_WINDOW(int8_t)
LAY_WINDOW(int16_t)
LAY_WINDOW(int32_t)

/* The same row for Megatron's batch: the labels are the unmasked tokens (a trained base's label is
 * label_bases[j], an untrained one's the token itself), `loss` (float32) is 1 where predicted and 0
 * elsewhere, and the ids are masked as above. */
#define MEGATRON_CELL(TRAINED)                                                                                         \
    int64_t code = codes[j], id = ids[j];                                                                              \
    int64_t trained = TRAINED;                                                                                         \
    int64_t hit = trained & -(int64_t)(code != MLM_NONE);                                                             \
    int64_t show = hit & -(int64_t)(code >= 0);                                                                       \
    labels[j] = ((int64_t)label_bases[j] & trained) | (id & ~trained);                                                \
    loss[j] = (float)(int32_t)(hit & 1); /* through int32: AVX2 converts int32 lanes to float, not int64 */           \
    ids[j] = (code & show) | (id & ~show);                                                                            \
    predicted -= hit;
#define LAY_WINDOW_MEGATRON(T)                                                                                         \
    VECTOR_CLONES static Py_ssize_t lay_window_megatron_##T(                                                         \
        int64_t *restrict ids, int64_t *restrict labels, float *restrict loss, const uint8_t *restrict label_bases,  \
        const T *restrict codes, const uint8_t *restrict dropped, Py_ssize_t n) {                                    \
        Py_ssize_t predicted = 0;                                                                                      \
        if (dropped) {                                                                                                 \
            for (Py_ssize_t j = 0; j < n; j++) {                                                                       \
                MEGATRON_CELL(-(int64_t)(dropped[j] == 0))                                                             \
            }                                                                                                          \
        } else {                                                                                                       \
            for (Py_ssize_t j = 0; j < n; j++) {                                                                       \
                MEGATRON_CELL(-1)                                                                                      \
            }                                                                                                          \
        }                                                                                                              \
        return predicted;                                                                                              \
    }
LAY_WINDOW_MEGATRON(int8_t)
LAY_WINDOW_MEGATRON(int16_t)
LAY_WINDOW_MEGATRON(int32_t)

/* lay_windows(ids, labels, label_bases, codes, code_size, dropped, first, lengths, rows, seq_length,
 * width, loss_mask): the hf labels of window rows whose bases (label_bases, uint8 rows x width) start
 * at token column `first`, written whole into int64 `labels` (rows x seq_length), with the masked-LM
 * codes (rows x width, code_size bytes) laid over int64 `ids` in place: a base before its row's length
 * (int64 lengths) is predicted when drawn and not dropped (uint8 rows x width, nonzero: not trained;
 * empty: every base is trained). loss_mask (float32 zeros, rows x seq_length; empty: the hf batch):
 * Megatron's batch instead, labels the unmasked tokens and loss_mask 1 where predicted. Returns the
 * number predicted. */
static PyObject *lay_windows(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer ids, labels, label_bases, codes, dropped, lengths, loss;
    int code_size;
    Py_ssize_t first, rows, seq_length, width;
    if (!PyArg_ParseTuple(args, "w*w*y*y*iy*ny*nnnw*", &ids, &labels, &label_bases, &codes, &code_size, &dropped,
                          &first, &lengths, &rows, &seq_length, &width, &loss))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t predicted = 0;
    int megatron = loss.len > 0;
    if (!sized(&ids, rows * seq_length * 8, "ids") || !sized(&labels, rows * seq_length * 8, "labels") ||
        !sized(&label_bases, rows * width, "label_bases") || !sized(&codes, rows * width * code_size, "codes") ||
        (dropped.len && !sized(&dropped, rows * width, "dropped")) || !sized(&lengths, rows * 8, "lengths") ||
        (megatron && !sized(&loss, rows * seq_length * 4, "loss_mask")))
        goto done;
    if (code_size != 1 && code_size != 2 && code_size != 4) {
        PyErr_Format(PyExc_ValueError, "codes of %d bytes: 1, 2 or 4 expected", code_size);
        goto done;
    }
    if (first < 0 || first > seq_length) {
        PyErr_Format(PyExc_ValueError, "first base column %zd outside a row of %zd", first, seq_length);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    const Py_ssize_t n_rows = rows, length = seq_length, w = width, p = first;
    int64_t *id = ids.buf, *label = labels.buf;
    const uint8_t *base = label_bases.buf, *drop = dropped.len ? dropped.buf : NULL;
    const int64_t *len = lengths.buf;
    const char *code = codes.buf;
    float *weight = megatron ? loss.buf : NULL;
    for (Py_ssize_t r = 0; r < n_rows; r++) {
        int64_t *row_ids = id + r * length, *row_labels = label + r * length;
        Py_ssize_t n = len[r] < 0 ? 0 : (Py_ssize_t)len[r];
        n = n < w ? n : w;
        n = n < length - p ? n : length - p;
        const uint8_t *row_drop = drop ? drop + r * w : NULL;
        const char *row_codes = code + r * w * code_size;
        if (weight) { /* the labels outside the bases are the tokens; the loss mask there stays 0 */
            float *row_loss = weight + r * length + p;
            memcpy(row_labels, row_ids, (size_t)p * sizeof(int64_t));
            memcpy(row_labels + p + n, row_ids + p + n, (size_t)(length - p - n) * sizeof(int64_t));
            switch (code_size) {
            case 1:
                predicted += lay_window_megatron_int8_t(row_ids + p, row_labels + p, row_loss, base + r * w,
                                                        (const int8_t *)row_codes, row_drop, n);
                break;
            case 2:
                predicted += lay_window_megatron_int16_t(row_ids + p, row_labels + p, row_loss, base + r * w,
                                                         (const int16_t *)row_codes, row_drop, n);
                break;
            default:
                predicted += lay_window_megatron_int32_t(row_ids + p, row_labels + p, row_loss, base + r * w,
                                                         (const int32_t *)row_codes, row_drop, n);
                break;
            }
            continue;
        }
        fill_ignore(row_labels, p);
        switch (code_size) {
        case 1:
            predicted += lay_window_int8_t(row_ids + p, row_labels + p, base + r * w, (const int8_t *)row_codes,
                                           row_drop, n);
            break;
        case 2:
            predicted += lay_window_int16_t(row_ids + p, row_labels + p, base + r * w, (const int16_t *)row_codes,
                                            row_drop, n);
            break;
        default:
            predicted += lay_window_int32_t(row_ids + p, row_labels + p, base + r * w, (const int32_t *)row_codes,
                                            row_drop, n);
            break;
        }
        fill_ignore(row_labels + p + n, length - p - n);
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(predicted);
done:
    PyBuffer_Release(&ids);
    PyBuffer_Release(&labels);
    PyBuffer_Release(&label_bases);
    PyBuffer_Release(&codes);
    PyBuffer_Release(&dropped);
    PyBuffer_Release(&lengths);
    PyBuffer_Release(&loss);
    return result;
}


/* A tokenizer's rows (ids of the compact batch, the codes over the same cells) to masked-LM model inputs,
 * one pass over every cell: a token is trained when its id is ordinary (lo <= id < hi: not special, not
 * padding) and, with `flags`, none of the `drop` bits of its flags is set (a soft-masked or degenerate
 * base out of the loss); it is predicted when trained and drawn (code != MLM_NONE); the id shown is the
 * code where predicted and the code is an id, else the token. `shown` gets those ids as int64. */
#define TOKEN_CELL(TRAINED)                                                                                            \
    int64_t id = ids[c], code = codes[c];                                                                              \
    int64_t hit = (TRAINED) & -(int64_t)(code != MLM_NONE);                                                           \
    int64_t show = hit & -(int64_t)(code >= 0);                                                                       \
    shown[c] = (code & show) | (id & ~show);                                                                          \
    predicted -= hit;
#define ORDINARY -(int64_t)((id >= lo) & (id < hi))
#define ORDINARY_KEPT -(int64_t)((id >= lo) & (id < hi) & ((flags[c] & drop) == 0))
/* Megatron's batch: labels the unmasked tokens, the loss mask 1 where predicted (through int32: AVX2
 * converts int32 lanes to float, not int64). */
#define MEGATRON_TOKEN(TRAINED)                                                                                        \
    for (Py_ssize_t c = 0; c < n; c++) {                                                                               \
        TOKEN_CELL(TRAINED)                                                                                            \
        labels[c] = id;                                                                                                \
        loss[c] = (float)(int32_t)(hit & 1);                                                                           \
    }
/* The hf batch: labels the token where predicted, else -100; with `attention`, 1 where not padding. */
#define HF_TOKEN(TRAINED, ATTENTION)                                                                                   \
    for (Py_ssize_t c = 0; c < n; c++) {                                                                               \
        TOKEN_CELL(TRAINED)                                                                                            \
        labels[c] = (id & hit) | (IGNORE_INDEX & ~hit);                                                              \
        ATTENTION                                                                                                      \
    }
#define PADDING_MASK attention[c] = (int64_t)(id != pad);
#define LAY_TOKENS(NAME, ID_T, CODE_T)                                                                                 \
    VECTOR_CLONES static Py_ssize_t lay_tokens_##NAME(                                                               \
        const ID_T *restrict ids, const CODE_T *restrict codes, const uint8_t *restrict flags, uint8_t drop,         \
        int64_t lo, int64_t hi, int64_t pad, int64_t *restrict shown, int64_t *restrict labels,                      \
        float *restrict loss, int64_t *restrict attention, Py_ssize_t n) {                                           \
        Py_ssize_t predicted = 0;                                                                                      \
        if (loss && flags) {                                                                                           \
            MEGATRON_TOKEN(ORDINARY_KEPT)                                                                              \
        } else if (loss) {                                                                                             \
            MEGATRON_TOKEN(ORDINARY)                                                                                   \
        } else if (attention && flags) {                                                                               \
            HF_TOKEN(ORDINARY_KEPT, PADDING_MASK)                                                                      \
        } else if (attention) {                                                                                        \
            HF_TOKEN(ORDINARY, PADDING_MASK)                                                                           \
        } else if (flags) {                                                                                            \
            HF_TOKEN(ORDINARY_KEPT, )                                                                                  \
        } else {                                                                                                       \
            HF_TOKEN(ORDINARY, )                                                                                       \
        }                                                                                                              \
        (void)pad;                                                                                                     \
        return predicted;                                                                                              \
    }
LAY_TOKENS(u8_i8, uint8_t, int8_t)
LAY_TOKENS(u8_i16, uint8_t, int16_t)
LAY_TOKENS(i16_i16, int16_t, int16_t)
LAY_TOKENS(i32_i32, int32_t, int32_t)

/* lay_tokens(ids, id_size, codes, code_size, flags, drop, lo, hi, pad, rows, width, shown, labels, loss_mask,
 * attention_mask): the masked-LM inputs of a tokenizer's compact rows (`mlm_tokens`; rows x width cells,
 * ids and codes over the same cells: a token's draw is in its own column). ids: uint8 (id_size 1, codes
 * int8 or int16), int16 (codes int16) or int32 (codes int32); flags: uint8 a cell or empty (none); drop:
 * the flag bits that leave a token out of the loss; lo .. hi - 1: the ordinary ids; pad: the padding id
 * (outside lo .. hi - 1; -1: none), whose trailing run in a row is filled, not laid cell by cell (the
 * inputs of a padding cell are constants: pad shown, no loss); shown, labels: int64 outputs; loss_mask:
 * float32 (Megatron's batch: labels the unmasked tokens) or empty (the hf batch: labels -100 where not
 * predicted), and then attention_mask: int64 1 where the id is not `pad`, or empty (not written).
 * Returns the number predicted. */
static PyObject *lay_tokens(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer ids, codes, flags, shown, labels, loss, attention;
    int id_size, code_size, drop;
    long long lo, hi, pad;
    Py_ssize_t rows, width;
    if (!PyArg_ParseTuple(args, "y*iy*iy*iLLLnnw*w*w*w*", &ids, &id_size, &codes, &code_size, &flags, &drop, &lo, &hi,
                          &pad, &rows, &width, &shown, &labels, &loss, &attention))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t predicted = 0;
    int megatron = loss.len > 0, with_flags = flags.len > 0 && (drop & 0xFF) != 0;
    Py_ssize_t cells = rows * width;
    if (!sized(&ids, cells * id_size, "ids") || !sized(&codes, cells * code_size, "codes") ||
        (flags.len && !sized(&flags, cells, "flags")) || !sized(&shown, cells * 8, "shown") ||
        !sized(&labels, cells * 8, "labels") || (megatron && !sized(&loss, cells * 4, "loss_mask")) ||
        (attention.len && !sized(&attention, cells * 8, "attention_mask")))
        goto done;
    int kind = id_size * 10 + code_size;
    if (kind != 11 && kind != 12 && kind != 22 && kind != 44) {
        PyErr_Format(PyExc_ValueError, "ids of %d bytes with codes of %d: (1, 1), (1, 2), (2, 2) or (4, 4) expected",
                     id_size, code_size);
        goto done;
    }
    if (pad >= lo && pad < hi) {
        PyErr_Format(PyExc_ValueError, "padding id %lld is one of the ordinary ids %lld .. %lld", pad, lo, hi - 1);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    const char *id = ids.buf, *code = codes.buf;
    const uint8_t *marks = with_flags ? flags.buf : NULL;
    int64_t *out = shown.buf, *label = labels.buf;
    float *weight = megatron ? loss.buf : NULL;
    int64_t *padding = !megatron && attention.len ? attention.buf : NULL;
    for (Py_ssize_t r = 0; r < rows; r++) {
        Py_ssize_t at = r * width, n = before_padding(id + at * id_size, width, id_size, pad), rest = width - n;
        const char *row_ids = id + at * id_size, *row_codes = code + at * code_size;
        const uint8_t *row_marks = marks ? marks + at : NULL;
        float *row_weight = weight ? weight + at : NULL;
        int64_t *row_padding = padding ? padding + at : NULL;
#define LAY_TOKENS_CALL(NAME, ID_T, CODE_T)                                                                            \
    lay_tokens_##NAME((const ID_T *)row_ids, (const CODE_T *)row_codes, row_marks, (uint8_t)drop, lo, hi, pad,         \
                      out + at, label + at, row_weight, row_padding, n)
        switch (kind) {
        case 11: predicted += LAY_TOKENS_CALL(u8_i8, uint8_t, int8_t); break;
        case 12: predicted += LAY_TOKENS_CALL(u8_i16, uint8_t, int16_t); break;
        case 22: predicted += LAY_TOKENS_CALL(i16_i16, int16_t, int16_t); break;
        default: predicted += LAY_TOKENS_CALL(i32_i32, int32_t, int32_t); break;
        }
        /* the trailing padding: pad shown; Megatron's label pad and no loss; hf's -100, no attention */
        fill_int64(out + at + n, rest, pad);
        fill_int64(label + at + n, rest, megatron ? pad : IGNORE_INDEX);
        if (row_weight)
            memset(row_weight + n, 0, (size_t)rest * sizeof(float));
        if (row_padding)
            memset(row_padding + n, 0, (size_t)rest * sizeof(int64_t));
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(predicted);
done:
    PyBuffer_Release(&ids);
    PyBuffer_Release(&codes);
    PyBuffer_Release(&flags);
    PyBuffer_Release(&shown);
    PyBuffer_Release(&labels);
    PyBuffer_Release(&loss);
    PyBuffer_Release(&attention);
    return result;
}

static PyMethodDef methods[] = {
    {"lay", lay, METH_VARARGS, "Lay a batch's masked-LM draws over its int64 ids and labels (mlm.lay_masks)."},
    {"lay_windows", lay_windows, METH_VARARGS, "Window rows' hf labels written with their masked-LM draws laid over."},
    {"lay_tokens", lay_tokens, METH_VARARGS, "A tokenizer's rows to masked-LM inputs, the draws laid over, one pass."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "mlm_lay", "Masked-LM draws laid over a batch (C).", -1,
                                    methods};

PyMODINIT_FUNC PyInit_mlm_lay(void) { return PyModule_Create(&module); }
