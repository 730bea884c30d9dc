/* An exact BPE encoder for Hugging Face BPE files whose tokens spell exactly their own strings
 * (no normalizer, no pre-tokenizer, no sub-word affixes: DNABERT-2's style), where each document is
 * one word. Used by bionemo_wds.load.tokenize.exact_bpe; the ids equal the `tokenizers` library's.
 *
 * Why hand-written: the Rust library's BPE model runs at about 2-7 Mbp per core-second on such
 * words (measured: docs/benchmarks.md), while the rest of the load path handles well over 100 Mbp/s;
 * this encoder gives the same ids several times faster.
 *
 * What it replicates (tokenizers 0.22, models/bpe/word.rs `Word::merge_all`, dropout off): every
 * character is a symbol (its one-character token); a heap holds each adjacent pair found in the
 * merges as (rank, pos, new_id), popped smallest (rank, pos) first; an entry is skipped when the
 * symbol at pos was removed, has no next, or the pair now at pos maps to another new_id than the
 * entry's; else the pair merges, the right symbol is removed, and the new pairs (prev, cur) at prev's
 * pos and (cur, next) at pos are queued.
 *
 * How: (rank, pos) orders the entries totally, and a skipped entry changes nothing, so any queue
 * that pops the entries the library would merge, in that order, merges the same pairs. Those are
 * exactly the pairs now adjacent: the pair at pos spells the bases from pos to the end of its right
 * symbol, a span that only grows (pos's symbol and its next only ever absorb their right
 * neighbours), so once the pair at pos changes, the string its entry would make is longer than
 * before, which in a vocabulary of one id per string (exact_bpe checks) is another id: the
 * library's new_id test fails for every entry of a changed pair, and ours takes such entries out
 * when the pair changes. The queue is one doubly linked list of positions per rank, in pos order
 * (a position queued out of order makes its list sorted before the next pop), and a bitmap finds
 * the smallest rank with a non-empty list. The merge table is an open-addressing hash from
 * (left id, right id) to (rank, new id); a pair listed twice keeps its last rank, as the library's
 * map does.
 *
 * build(char_ids, lefts, rights, new_ids) -> table (a capsule)
 * encode(table, text, bounds, ids, starts, widths, counts) -> tokens, or -1 when a byte of text has
 *     no one-character token (the caller then runs the library, which handles unknown bytes).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NIL UINT32_MAX
#define REMOVED UINT32_MAX
#define EMPTY_KEY UINT64_MAX
#define CAPSULE_NAME "bionemo_wds.bpe_native.table"
/* Entries have arrived in pos order in every input tried; tests/test_bpe_native.py compiles a copy
 * with -DBPE_NATIVE_SORT_ALWAYS=1, where every list is sorted, so that sort_rank is checked too. */
#ifdef BPE_NATIVE_SORT_ALWAYS
#define SORT_ALWAYS 1
#else
#define SORT_ALWAYS 0
#endif

typedef struct {
    uint64_t key; /* left id << 32 | right id; EMPTY_KEY: a free slot */
    uint32_t rank;
    uint32_t new_id;
} Slot;

typedef struct {
    int64_t char_ids[256]; /* the one-character token of each byte; -1: none */
    uint32_t n_ranks;      /* ranks are 0 .. n_ranks - 1 */
    uint32_t mask;         /* slots - 1 (a power of two less one) */
    uint32_t n_ids;        /* 1 + the largest id a symbol can have */
    Slot *slots;
    int32_t *byte_pairs; /* byte_pairs[b1 << 8 | b2]: the slot of the pair of their one-character tokens; -1: none */
    uint8_t *sides; /* sides[id]: bit 1 if a merge's left token is id, bit 2 if a merge's right token is */
} Table;

/* One position of a document: its symbol, and the queue entry of the pair it starts (if any). */
typedef struct {
    uint32_t c;           /* token id; REMOVED: merged into the symbol on its left */
    int32_t prev, next;   /* the neighbouring symbols' positions, -1 at the ends */
    uint32_t rank;        /* the rank of the pair (c, next's c); NIL: not a merge, so not queued */
    uint32_t new_id;      /* the token that pair makes */
    uint32_t lprev, lnext; /* the neighbouring entries (positions) in the rank's list */
} Position;

/* A rank's list of positions: in pos order unless `unsorted` (one cache line holds all three). */
typedef struct {
    uint32_t head, tail, unsorted;
} List;

/* One encode call's work space: sized once for its longest document. */
typedef struct {
    Position *at;
    List *lists; /* each rank's list of positions */
    uint32_t *gather;
    uint64_t *nonempty; /* a bit per rank whose list is not empty */
    uint32_t lowest;    /* no rank below it has a non-empty list */
} Work;

static inline uint32_t slot_of(const Table *t, uint64_t key) {
    return (uint32_t)((key * 0x9E3779B97F4A7C15ULL) >> 32) & t->mask;
}

/* The (rank, new id) of the pair (a, b), or NULL when it is not a merge. */
static inline const Slot *find(const Table *t, uint32_t a, uint32_t b) {
    /* most pairs of long tokens are in no merge: two bytes read in L1 say so without the hash */
    if (!(t->sides[a] & 1) || !(t->sides[b] & 2)) return NULL; /* every symbol's id is below n_ids */
    uint64_t key = ((uint64_t)a << 32) | b;
    uint32_t i = slot_of(t, key);
    for (;;) {
        const Slot *s = &t->slots[i];
        if (s->key == key) return s;
        if (s->key == EMPTY_KEY) return NULL;
        i = (i + 1) & t->mask;
    }
}

/* Queues the pair that starts at p (its symbol and the next), if it is a merge (m: its slot). */
static inline void enqueue_slot(Work *w, uint32_t p, const Slot *m) {
    Position *a = &w->at[p];
    if (!m) {
        a->rank = NIL;
        return;
    }
    uint32_t rank = m->rank;
    a->rank = rank;
    a->new_id = m->new_id;
    a->lnext = NIL;
    uint64_t bit = 1ULL << (rank & 63);
    if (!(w->nonempty[rank >> 6] & bit)) {
        w->nonempty[rank >> 6] |= bit;
        w->lists[rank].head = w->lists[rank].tail = p;
        a->lprev = NIL;
        w->lists[rank].unsorted = 0;
    } else if (!SORT_ALWAYS && !w->lists[rank].unsorted && p > w->lists[rank].tail) {
        a->lprev = w->lists[rank].tail;
        w->at[w->lists[rank].tail].lnext = p;
        w->lists[rank].tail = p;
    } else { /* out of pos order: first, and the list is sorted before its next pop */
        a->lprev = NIL;
        a->lnext = w->lists[rank].head;
        w->at[w->lists[rank].head].lprev = p;
        w->lists[rank].head = p;
        w->lists[rank].unsorted = 1;
    }
    if (rank < w->lowest) w->lowest = rank;
}

static inline void enqueue(const Table *t, Work *w, uint32_t p) {
    const Position *a = &w->at[p];
    enqueue_slot(w, p, a->next >= 0 ? find(t, a->c, w->at[a->next].c) : NULL);
}

/* Takes the pair that starts at p out of the queue (its pair changed, or its symbol was merged away). */
static inline void dequeue(Work *w, uint32_t p) {
    Position *a = &w->at[p];
    uint32_t rank = a->rank;
    if (rank == NIL) return;
    a->rank = NIL;
    if (a->lprev != NIL)
        w->at[a->lprev].lnext = a->lnext;
    else
        w->lists[rank].head = a->lnext;
    if (a->lnext != NIL)
        w->at[a->lnext].lprev = a->lprev;
    else
        w->lists[rank].tail = a->lprev;
    if (w->lists[rank].head == NIL) w->nonempty[rank >> 6] &= ~(1ULL << (rank & 63));
}

static int ascending(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Puts rank's list in pos order (a pair was queued before one at a larger pos). */
static void sort_rank(Work *w, uint32_t rank) {
    uint32_t n = 0, *g = w->gather;
    for (uint32_t p = w->lists[rank].head; p != NIL; p = w->at[p].lnext) g[n++] = p;
    if (n <= 32) { /* insertion sort: most lists are a few entries */
        for (uint32_t i = 1; i < n; i++) {
            uint32_t v = g[i], j = i;
            for (; j > 0 && g[j - 1] > v; j--) g[j] = g[j - 1];
            g[j] = v;
        }
    } else {
        qsort(g, n, sizeof *g, ascending);
    }
    for (uint32_t i = 0; i < n; i++) {
        w->at[g[i]].lprev = i ? g[i - 1] : NIL;
        w->at[g[i]].lnext = i + 1 < n ? g[i + 1] : NIL;
    }
    w->lists[rank].head = g[0];
    w->lists[rank].tail = g[n - 1];
    w->lists[rank].unsorted = 0;
}

/* The smallest rank at or above w->lowest with a non-empty list, or NIL when the queue is empty. */
static inline uint32_t lowest_rank(const Work *w, uint32_t words) {
    if (w->lowest == NIL) return NIL;
    uint32_t word = w->lowest >> 6;
    uint64_t bits = w->nonempty[word] & (~0ULL << (w->lowest & 63));
    while (!bits) {
        if (++word >= words) return NIL;
        bits = w->nonempty[word];
    }
    return (word << 6) | (uint32_t)__builtin_ctzll(bits);
}

/* Encodes one document of n bytes (n >= 1); its tokens go to ids, starts (from `offset`) and widths.
 * Returns how many, or -1 when a byte has no one-character token. */
static int64_t encode_word(const Table *t, Work *w, const uint8_t *s, uint32_t n, int64_t offset, int64_t *ids,
                           int64_t *starts, int64_t *widths) {
    Position *at = w->at;
    for (uint32_t i = 0; i < n; i++) {
        int64_t c = t->char_ids[s[i]];
        if (c < 0) return -1;
        at[i].c = (uint32_t)c;
        at[i].prev = (int32_t)i - 1;
        at[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    w->lowest = NIL;
    for (uint32_t i = 0; i + 1 < n; i++) { /* a pair of bytes: its slot from the table of byte pairs */
        int32_t slot = t->byte_pairs[(uint32_t)s[i] << 8 | s[i + 1]];
        enqueue_slot(w, i, slot >= 0 ? &t->slots[slot] : NULL);
    }
    at[n - 1].rank = NIL;
    uint32_t words = (t->n_ranks + 63) >> 6;
    for (;;) {
        uint32_t r = lowest_rank(w, words);
        if (r == NIL) break;
        w->lowest = r;
        if (w->lists[r].unsorted) sort_rank(w, r);
        uint32_t p = w->lists[r].head;
        Position *cur = &at[p];
        uint32_t q = (uint32_t)cur->next;
        Position *right = &at[q];
        dequeue(w, p);
        dequeue(w, q);
        if (cur->prev >= 0) dequeue(w, (uint32_t)cur->prev);
        cur->c = cur->new_id;
        cur->next = right->next;
        right->c = REMOVED;
        if (cur->next >= 0) at[cur->next].prev = (int32_t)p;
        if (cur->prev >= 0) enqueue(t, w, (uint32_t)cur->prev);
        enqueue(t, w, p);
    }
    int64_t k = 0;
    for (int32_t i = 0; i >= 0; i = at[i].next) {
        int32_t end = at[i].next >= 0 ? at[i].next : (int32_t)n;
        ids[k] = at[i].c;
        starts[k] = offset + i;
        widths[k] = end - i;
        k++;
    }
    return k;
}

static void free_table(PyObject *capsule) {
    Table *t = PyCapsule_GetPointer(capsule, CAPSULE_NAME);
    if (t) {
        free(t->sides);
        free(t->byte_pairs);
        free(t->slots);
        free(t);
    }
}

/* A C-contiguous buffer of `itemsize`-byte items (writable if asked); -1 with an exception if not. */
static int get_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, int writable, const char *name) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    const char *f = view->format ? view->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    int integer = itemsize == 1 ? (strcmp(f, "B") == 0 || strcmp(f, "b") == 0 || strcmp(f, "c") == 0)
                                : (strcmp(f, "q") == 0 || (strcmp(f, "l") == 0 && sizeof(long) == 8));
    if (view->itemsize != itemsize || !integer) {
        PyErr_Format(PyExc_TypeError, "%s must be a contiguous buffer of %s", name,
                     itemsize == 1 ? "bytes (uint8)" : "int64");
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *build(PyObject *self, PyObject *args) {
    PyObject *objs[4];
    Py_buffer v[4];
    const char *names[4] = {"char_ids", "lefts", "rights", "new_ids"};
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOO:build", &objs[0], &objs[1], &objs[2], &objs[3])) return NULL;
    int got = 0;
    for (; got < 4; got++)
        if (get_buffer(objs[got], &v[got], 8, 0, names[got]) < 0) goto fail;
    Py_ssize_t n = v[1].len / 8;
    if (v[0].len != 256 * 8 || v[2].len / 8 != n || v[3].len / 8 != n || n >= (Py_ssize_t)UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "build: 256 char_ids and as many lefts, rights and new_ids");
        goto fail;
    }
    const int64_t *chars = v[0].buf, *lefts = v[1].buf, *rights = v[2].buf, *news = v[3].buf;
    for (Py_ssize_t i = 0; i < (n > 256 ? n : 256); i++) {
        if ((i < n && (lefts[i] < 0 || rights[i] < 0 || news[i] < 0 || lefts[i] >= INT32_MAX ||
                       rights[i] >= INT32_MAX || news[i] >= INT32_MAX)) ||
            (i < 256 && chars[i] >= INT32_MAX)) {
            PyErr_SetString(PyExc_ValueError, "build: token ids must lie in [0, 2**31 - 1)");
            goto fail;
        }
    }
    uint64_t slots = 16; /* a quarter full at most: short probes */
    while (slots < 4 * (uint64_t)n) slots <<= 1;
    uint32_t n_ids = 1; /* above every id a symbol can have: a one-character token's or a merge's */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (lefts[i] >= n_ids) n_ids = (uint32_t)lefts[i] + 1;
        if (rights[i] >= n_ids) n_ids = (uint32_t)rights[i] + 1;
        if (news[i] >= n_ids) n_ids = (uint32_t)news[i] + 1;
    }
    for (int i = 0; i < 256; i++)
        if (chars[i] >= n_ids) n_ids = (uint32_t)chars[i] + 1;
    Table *t = calloc(1, sizeof *t);
    Slot *s = t ? malloc(slots * sizeof *s) : NULL;
    uint8_t *sides = s ? calloc(n_ids, 1) : NULL;
    int32_t *byte_pairs = sides ? malloc(65536 * sizeof *byte_pairs) : NULL;
    if (!byte_pairs) {
        free(sides);
        free(s);
        free(t);
        PyErr_NoMemory();
        goto fail;
    }
    for (int i = 0; i < 256; i++) t->char_ids[i] = chars[i] < 0 ? -1 : chars[i];
    t->n_ranks = (uint32_t)n;
    t->mask = (uint32_t)(slots - 1);
    t->slots = s;
    t->n_ids = n_ids;
    t->sides = sides;
    for (Py_ssize_t i = 0; i < n; i++) {
        sides[lefts[i]] |= 1;
        sides[rights[i]] |= 2;
    }
    for (uint64_t i = 0; i < slots; i++) s[i].key = EMPTY_KEY;
    for (Py_ssize_t i = 0; i < n; i++) { /* a pair listed twice: the later rank, as the library's map */
        uint64_t key = ((uint64_t)lefts[i] << 32) | (uint64_t)rights[i];
        uint32_t j = slot_of(t, key);
        while (s[j].key != EMPTY_KEY && s[j].key != key) j = (j + 1) & t->mask;
        s[j].key = key;
        s[j].rank = (uint32_t)i;
        s[j].new_id = (uint32_t)news[i];
    }
    t->byte_pairs = byte_pairs;
    for (uint32_t pair = 0; pair < 65536; pair++) {
        int64_t a = t->char_ids[pair >> 8], b = t->char_ids[pair & 255];
        const Slot *m = a >= 0 && b >= 0 ? find(t, (uint32_t)a, (uint32_t)b) : NULL;
        byte_pairs[pair] = m ? (int32_t)(m - s) : -1;
    }
    for (int i = 0; i < got; i++) PyBuffer_Release(&v[i]);
    PyObject *capsule = PyCapsule_New(t, CAPSULE_NAME, free_table);
    if (!capsule) {
        free(byte_pairs);
        free(sides);
        free(s);
        free(t);
    }
    return capsule;
fail:
    for (int i = 0; i < got; i++) PyBuffer_Release(&v[i]);
    return NULL;
}

static void free_work(Work *w) {
    free(w->at);
    free(w->lists);
    free(w->gather);
    free(w->nonempty);
}

static PyObject *encode(PyObject *self, PyObject *args) {
    PyObject *capsule, *objs[6];
    Py_buffer v[6];
    const char *names[6] = {"text", "bounds", "ids", "starts", "widths", "counts"};
    const Py_ssize_t sizes[6] = {1, 8, 8, 8, 8, 8};
    const int writable[6] = {0, 0, 1, 1, 1, 1};
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOOOO:encode", &capsule, &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &objs[5]))
        return NULL;
    const Table *t = PyCapsule_GetPointer(capsule, CAPSULE_NAME);
    if (!t) return NULL;
    int got = 0;
    for (; got < 6; got++)
        if (get_buffer(objs[got], &v[got], sizes[got], writable[got], names[got]) < 0) goto fail;
    Py_ssize_t n = v[0].len, docs = v[1].len / 8 - 1;
    const int64_t *bounds = v[1].buf;
    if (docs < 0 || v[5].len / 8 != docs || v[2].len / 8 < n || v[3].len / 8 < n || v[4].len / 8 < n) {
        PyErr_SetString(PyExc_ValueError, "encode: counts one shorter than bounds; ids, starts, widths as long as text");
        goto fail;
    }
    int64_t longest = 0;
    for (Py_ssize_t d = 0; d < docs; d++) {
        if (bounds[d] < 0 || bounds[d + 1] < bounds[d] || bounds[d + 1] > n) {
            PyErr_SetString(PyExc_ValueError, "encode: bounds must rise within the text");
            goto fail;
        }
        if (bounds[d + 1] - bounds[d] > longest) longest = bounds[d + 1] - bounds[d];
    }
    if (longest >= INT32_MAX / 3) {
        PyErr_SetString(PyExc_ValueError, "encode: a document of 700 million bases or more");
        goto fail;
    }
    size_t len = (size_t)longest + 1, words = (t->n_ranks + 63) / 64 + 1, ranks = (size_t)t->n_ranks + 1;
    Work w = {0};
    w.at = malloc(len * sizeof *w.at);
    w.gather = malloc(len * sizeof *w.gather);
    w.lists = malloc(ranks * sizeof *w.lists);
    w.nonempty = calloc(words, sizeof *w.nonempty);
    if (!w.at || !w.gather || !w.lists || !w.nonempty) {
        free_work(&w);
        PyErr_NoMemory();
        goto fail;
    }
    const uint8_t *text = v[0].buf;
    int64_t *ids = v[2].buf, *starts = v[3].buf, *widths = v[4].buf, *counts = v[5].buf, total = 0;
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t d = 0; d < docs; d++) {
        int64_t size = bounds[d + 1] - bounds[d], k = 0;
        if (size > 0) {
            k = encode_word(t, &w, text + bounds[d], (uint32_t)size, bounds[d], ids + total, starts + total,
                            widths + total);
            if (k < 0) {
                total = -1;
                break;
            }
        }
        counts[d] = k;
        total += k;
    }
    Py_END_ALLOW_THREADS;
    free_work(&w);
    for (int i = 0; i < got; i++) PyBuffer_Release(&v[i]);
    return PyLong_FromLongLong(total);
fail:
    for (int i = 0; i < got; i++) PyBuffer_Release(&v[i]);
    return NULL;
}

static PyMethodDef methods[] = {
    {"build", build, METH_VARARGS,
     "build(char_ids, lefts, rights, new_ids) -> table: the merge table of a BPE (int64 buffers: the "
     "one-character token of each byte or -1, and each merge's left, right and new id in rank order)."},
    {"encode", encode, METH_VARARGS,
     "encode(table, text, bounds, ids, starts, widths, counts) -> tokens: every document text[bounds[d]:"
     "bounds[d + 1]] as one word; its ids, first bases and widths written one document after another, "
     "counts[d] its tokens. -1 when a byte has no one-character token (nothing is then complete)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "bpe_native", "The exact BPE encoder of bionemo_wds.load.tokenize.exact_bpe.", -1, methods,
};

PyMODINIT_FUNC PyInit_bpe_native(void) { return PyModule_Create(&module); }
