/* The rows of one .eh_frame or .debug_frame section, in C: what host/unwind/cfi.py (iter_fdes) and
 * host/unwind/interp.py (run) do, record for record, without a Python object per FDE or row.
 *
 * Python keeps the reference implementation and the rest of the table's build (table.py): it compiles each
 * distinct state this returns into a rule and sorts and merges the rows. tests/unit/unwind/test_cfi_rows.py
 * checks that both give the same table, row for row, on the libraries of the machine. A state's expression
 * bytes (DW_CFA_def_cfa_expression, DW_CFA_expression) are given as their place in the section, which Python
 * slices. Built into native/build/libdeepctx_cfi.so (native/Makefile), loaded by host/unwind/native_rows.py. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

enum { UNSET, UNDEF, SAME, OFFSET, VAL_OFFSET, REGISTER, EXPR, VAL_EXPR };

struct cfi_rule { /* a register's rule: (kind, value) or (kind, expression at expr_off, expr_len) */
    int64_t kind, value, expr_off, expr_len;
};

struct cfi_state { /* interp.State: cfa_reg -1 = no CFA rule; expr_len -1 = no CFA expression */
    int64_t cfa_reg, cfa_off, expr_off, expr_len;
    struct cfi_rule fp, ra;
};

struct cfi_out { /* what one section gave; arrays malloc'd here, freed by cfi_free */
    uint64_t *begins, *ends, *counts; /* per FDE kept: pc range and its rows */
    uint32_t *rel, *state;            /* per row: offset from the FDE's begin, index into states */
    struct cfi_state *states;         /* distinct states */
    uint64_t *first;                  /* per state: its first row, ~0 for a state only a skipped FDE had */
    uint64_t fdes, rows, nstates, errors;
    int64_t over_cap; /* rows before merging went past max_rows */
    uint64_t cap_fdes; /* the FDE arrays' room */
};

#define MAX_SPAN (1ull << 32)
#define MAX_STACK 64 /* remember_state depth; deeper: an error, as no compiler emits it */

struct buf {
    const uint8_t *p;
    uint64_t n;
};

/* Values are saturated, not wrapped: Python's reference keeps them exact (unbounded ints), and any value past
 * int64 is past what a rule can hold (arch.compile_state: 32-bit CFA offsets, 16-bit register offsets), so a
 * saturated one compiles to the same unsupported rule where a wrapped one could pass for a small offset. */
static int64_t sat128(__int128 v) { return v > INT64_MAX ? INT64_MAX : v < INT64_MIN ? INT64_MIN : (int64_t)v; }
static int64_t mul_sat(int64_t a, int64_t b) { return sat128((__int128)a * b); }
static int64_t neg_sat(int64_t a) { return sat128(-(__int128)a); }

/* An unsigned LEB128: INT64_MAX for any value past it (a register number, an offset or a length that large is
 * refused or unsupported either way). */
static int rd_uleb(struct buf b, uint64_t *pos, uint64_t *out) {
    if (*pos < b.n && b.p[*pos] < 0x80) { /* most: one byte */
        *out = b.p[(*pos)++];
        return 0;
    }
    unsigned __int128 r = 0;
    unsigned shift = 0;
    int big = 0;
    for (;;) {
        if (*pos >= b.n)
            return -1;
        uint8_t c = b.p[(*pos)++];
        if (shift < 126)
            r |= (unsigned __int128)(c & 0x7f) << shift;
        else if (c & 0x7f)
            big = 1;
        shift += 7;
        if (c < 0x80)
            break;
    }
    *out = big || r > INT64_MAX ? (uint64_t)INT64_MAX : (uint64_t)r;
    return 0;
}

/* A signed LEB128, saturated to int64. */
static int rd_sleb(struct buf b, uint64_t *pos, int64_t *out) {
    if (*pos < b.n && b.p[*pos] < 0x80) { /* most: one byte */
        uint8_t c = b.p[(*pos)++];
        *out = (c & 0x40) ? (int64_t)c - 0x80 : (int64_t)c;
        return 0;
    }
    unsigned __int128 r = 0;
    unsigned shift = 0;
    int big = 0;
    uint8_t c;
    for (;;) {
        if (*pos >= b.n)
            return -1;
        c = b.p[(*pos)++];
        if (shift < 126)
            r |= (unsigned __int128)(c & 0x7f) << shift;
        else if ((c & 0x7f) != ((c & 0x40) ? 0x7f : 0))
            big = 1;
        shift += 7;
        if (c < 0x80)
            break;
    }
    if (big) {
        *out = (c & 0x40) ? INT64_MIN : INT64_MAX;
        return 0;
    }
    if (c & 0x40) /* past 126 bits the payload was all sign (else big above) */
        r |= ~(unsigned __int128)0 << (shift < 126 ? shift : 126);
    *out = sat128((__int128)r);
    return 0;
}

static int rd_fixed(struct buf b, uint64_t pos, unsigned size, uint64_t *out) {
    if (pos > b.n || size > b.n - pos) /* not pos + size: a CIE pointer of a crafted FDE can be near 2^64 */
        return -1;
    uint64_t v = 0;
    for (unsigned i = 0; i < size; i++)
        v |= (uint64_t)b.p[pos + i] << (8 * i);
    *out = v;
    return 0;
}

/* cfi.read_encoded: a DW_EH_PE pointer at pos (field_addr: its runtime address, for pcrel). */
static int rd_encoded(struct buf b, uint64_t *pos, unsigned enc, uint64_t field_addr, uint64_t *out) {
    uint64_t v;
    unsigned fmt = enc & 0x0f, size = 0;
    int sign = 0;
    switch (fmt) {
    case 0x00: size = 8; break;
    case 0x01: if (rd_uleb(b, pos, &v)) return -1; break;
    case 0x09: { int64_t s; if (rd_sleb(b, pos, &s)) return -1; v = (uint64_t)s; break; }
    case 0x02: size = 2; break;
    case 0x03: size = 4; break;
    case 0x04: size = 8; break;
    case 0x0a: size = 2; sign = 1; break;
    case 0x0b: size = 4; sign = 1; break;
    case 0x0c: size = 8; sign = 1; break;
    default: return -1;
    }
    if (size) {
        if (rd_fixed(b, *pos, size, &v))
            return -1;
        *pos += size;
        if (sign && size < 8 && (v >> (8 * size - 1)) & 1)
            v |= ~0ull << (8 * size);
    }
    unsigned app = enc & 0x70;
    if (app == 0x10)
        v += field_addr;
    else if (app != 0)
        return -1;
    if (enc & 0x80)
        return -1;
    *out = v;
    return 0;
}

struct cie {
    uint64_t offset, init_off, init_len;
    uint64_t code_align;
    int64_t data_align;
    unsigned fde_enc, has_z;
    int ok, have_state;
    struct cfi_state state; /* after its initial instructions (have_state) */
};

/* cfi._parse_cie: pos after the id, end the record's end. */
static int parse_cie(struct buf b, uint64_t pos, uint64_t end, int is_eh, struct cie *c) {
    if (pos >= b.n)
        return -1;
    if (end > b.n) /* a CIE an FDE points at may run past the section: its instructions end with it */
        end = b.n;
    unsigned version = b.p[pos++];
    const uint8_t *nul = memchr(b.p + pos, 0, b.n - pos);
    if (!nul)
        return -1;
    const char *aug = (const char *)b.p + pos;
    uint64_t aug_len_s = (uint64_t)(nul - (b.p + pos));
    pos += aug_len_s + 1;
    if (!is_eh && version >= 4)
        pos += 2;
    if (aug_len_s >= 2 && aug[0] == 'e' && aug[1] == 'h')
        return -1;
    uint64_t ra;
    if (rd_uleb(b, &pos, &c->code_align) || rd_sleb(b, &pos, &c->data_align))
        return -1;
    if (version == 1) {
        if (pos >= b.n)
            return -1;
        pos++;
    } else if (rd_uleb(b, &pos, &ra)) {
        return -1;
    }
    c->fde_enc = 0;
    c->has_z = aug_len_s > 0 && aug[0] == 'z';
    if (c->has_z) {
        uint64_t alen;
        if (rd_uleb(b, &pos, &alen))
            return -1;
        uint64_t aend = pos > end || alen > end - pos ? end : pos + alen; /* past the record: none left */
        for (uint64_t i = 1; i < aug_len_s; i++) {
            char ch = aug[i];
            if (ch == 'R') {
                if (pos >= b.n)
                    return -1;
                c->fde_enc = b.p[pos++];
            } else if (ch == 'L') {
                pos++;
            } else if (ch == 'P') {
                if (pos >= b.n)
                    return -1;
                unsigned penc = b.p[pos];
                uint64_t p2 = pos + 1, ignored;
                if (rd_encoded(b, &p2, penc & 0x7f, 0, &ignored))
                    return -1;
                pos = p2;
            } else if (ch == 'S' || ch == 'B' || ch == 'G') {
            } else {
                break;
            }
        }
        pos = aend;
    } else if (aug_len_s) {
        return -1;
    }
    c->init_off = pos;
    c->init_len = end > pos ? end - pos : 0;
    c->ok = 1;
    return 0;
}

struct rows {
    uint32_t *rel, *state;
    uint64_t n, cap;
};

struct states {
    struct cfi_state *v;
    uint64_t n, cap;
    uint32_t *slots; /* open addressing: index + 1, 0 = empty */
    uint64_t nslots;
};

static uint64_t hash_state(const struct cfi_state *s) {
    const uint64_t *w = (const uint64_t *)s;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof(*s) / 8; i++) {
        h ^= w[i];
        h *= 1099511628211ull;
        h ^= h >> 29;
    }
    return h;
}

static int64_t intern(struct states *t, const struct cfi_state *s) {
    if (t->n * 2 >= t->nslots) {
        uint64_t ns = t->nslots ? t->nslots * 2 : 1024;
        uint32_t *slots = calloc(ns, sizeof(*slots));
        if (!slots)
            return -1;
        for (uint64_t i = 0; i < t->n; i++) {
            uint64_t h = hash_state(&t->v[i]) & (ns - 1);
            while (slots[h])
                h = (h + 1) & (ns - 1);
            slots[h] = (uint32_t)(i + 1);
        }
        free(t->slots);
        t->slots = slots;
        t->nslots = ns;
    }
    uint64_t h = hash_state(s) & (t->nslots - 1);
    while (t->slots[h]) {
        uint32_t i = t->slots[h] - 1;
        if (memcmp(&t->v[i], s, sizeof(*s)) == 0)
            return i;
        h = (h + 1) & (t->nslots - 1);
    }
    if (t->n == t->cap) {
        uint64_t nc = t->cap ? t->cap * 2 : 256;
        struct cfi_state *v = realloc(t->v, nc * sizeof(*v));
        if (!v)
            return -1;
        t->v = v;
        t->cap = nc;
    }
    t->v[t->n] = *s;
    t->slots[h] = (uint32_t)(t->n + 1);
    return (int64_t)t->n++;
}

static int push_row(struct rows *r, struct states *t, uint64_t loc, const struct cfi_state *s) {
    int64_t i = intern(t, s);
    if (i < 0)
        return -2;
    if (r->n == r->cap) {
        uint64_t nc = r->cap ? r->cap * 2 : 4096;
        uint32_t *a = realloc(r->rel, nc * sizeof(*a));
        if (!a)
            return -2;
        r->rel = a;
        uint32_t *b2 = realloc(r->state, nc * sizeof(*b2));
        if (!b2)
            return -2;
        r->state = b2;
        r->cap = nc;
    }
    r->rel[r->n] = (uint32_t)loc;
    r->state[r->n] = (uint32_t)i;
    r->n++;
    return 0;
}

/* loc advanced by delta code units; -1 past 4 GiB (Python's unbounded int gives the same error, at the end). */
static int advance(uint64_t *loc, uint64_t delta, uint64_t code_align) {
    if (code_align && delta > (MAX_SPAN - *loc) / code_align)
        return -1;
    *loc += delta * code_align;
    return *loc >= MAX_SPAN ? -1 : 0;
}

static void set_reg(struct cfi_state *s, uint64_t reg, unsigned fp_reg, unsigned ra_reg, struct cfi_rule rule) {
    if (reg == fp_reg)
        s->fp = rule;
    else if (reg == ra_reg)
        s->ra = rule;
}

/* interp.run over code [off, off+len) of b. rows may be NULL (a CIE's initial instructions: only the final
 * state). Returns 0, -1 for malformed CFI (the FDE is skipped), -2 out of memory. */
static int run(struct buf b, uint64_t off, uint64_t len, const struct cfi_state *init, const struct cfi_state *cie_init,
               uint64_t code_align, int64_t data_align, unsigned fp_reg, unsigned ra_reg, struct rows *rows,
               struct states *t, struct cfi_state *final, uint64_t *last_loc) {
    struct buf c = {b.p, off + len};
    struct cfi_state s = *init, stack[MAX_STACK];
    unsigned depth = 0;
    uint64_t loc = 0, pos = off, u, reg, other;
    int64_t sv;
    int rc;
#define ROW()                                                                 \
    do {                                                                      \
        if (rows && loc < MAX_SPAN && (rc = push_row(rows, t, loc, &s)) != 0) \
            return rc;                                                        \
    } while (0)
    while (pos < c.n) {
        uint8_t op = c.p[pos++];
        uint8_t hi = op & 0xc0;
        if (hi == 0x40) {
            ROW();
            if (advance(&loc, op & 0x3f, code_align))
                return -1;
            continue;
        }
        if (hi == 0x80) {
            if (rd_uleb(c, &pos, &u))
                return -1;
            set_reg(&s, op & 0x3f, fp_reg, ra_reg, (struct cfi_rule){OFFSET, mul_sat((int64_t)u, data_align), 0, 0});
            continue;
        }
        if (hi == 0xc0) {
            reg = op & 0x3f;
            if (reg == fp_reg)
                s.fp = cie_init->fp;
            else if (reg == ra_reg)
                s.ra = cie_init->ra;
            continue;
        }
        switch (op) {
        case 0x0e:
            if (rd_uleb(c, &pos, &u))
                return -1;
            s.cfa_off = (int64_t)u;
            s.expr_off = 0, s.expr_len = -1;
            break;
        case 0x00:
            break;
        case 0x0a:
            if (depth == MAX_STACK)
                return -1;
            stack[depth++] = s;
            break;
        case 0x0b:
            if (!depth)
                return -1;
            s = stack[--depth];
            break;
        case 0x02:
        case 0x03:
        case 0x04: {
            unsigned size = 1u << (op - 2);
            ROW();
            if (rd_fixed(c, pos, size, &u))
                return -1;
            pos += size;
            if (advance(&loc, u, code_align))
                return -1;
            break;
        }
        case 0x0c:
            if (rd_uleb(c, &pos, &reg) || rd_uleb(c, &pos, &u))
                return -1;
            s.cfa_reg = (int64_t)reg, s.cfa_off = (int64_t)u;
            s.expr_off = 0, s.expr_len = -1;
            break;
        case 0x0d:
            if (rd_uleb(c, &pos, &reg))
                return -1;
            s.cfa_reg = (int64_t)reg;
            s.expr_off = 0, s.expr_len = -1;
            break;
        case 0x12:
            if (rd_uleb(c, &pos, &reg) || rd_sleb(c, &pos, &sv))
                return -1;
            s.cfa_reg = (int64_t)reg, s.cfa_off = mul_sat(sv, data_align);
            s.expr_off = 0, s.expr_len = -1;
            break;
        case 0x13:
            if (rd_sleb(c, &pos, &sv))
                return -1;
            s.cfa_off = mul_sat(sv, data_align);
            s.expr_off = 0, s.expr_len = -1;
            break;
        case 0x0f:
            if (rd_uleb(c, &pos, &u) || u > c.n - pos) /* not pos + u: a huge u would wrap it backwards */
                return -1;
            s.expr_off = (int64_t)pos, s.expr_len = (int64_t)u;
            s.cfa_reg = -1, s.cfa_off = 0;
            pos += u;
            break;
        case 0x05:
        case 0x11:
        case 0x14:
        case 0x15:
        case 0x2f: {
            int64_t off;
            if (rd_uleb(c, &pos, &reg))
                return -1;
            if (op == 0x11 || op == 0x15) {
                if (rd_sleb(c, &pos, &off))
                    return -1;
            } else {
                if (rd_uleb(c, &pos, &u))
                    return -1;
                off = (int64_t)u;
            }
            off = mul_sat(off, data_align);
            if (op == 0x2f)
                off = neg_sat(off);
            set_reg(&s, reg, fp_reg, ra_reg,
                    (struct cfi_rule){(op == 0x14 || op == 0x15) ? VAL_OFFSET : OFFSET, off, 0, 0});
            break;
        }
        case 0x06:
        case 0x07:
        case 0x08: {
            if (rd_uleb(c, &pos, &reg))
                return -1;
            struct cfi_rule rule;
            if (op == 0x06)
                rule = reg == fp_reg ? cie_init->fp : cie_init->ra;
            else
                rule = (struct cfi_rule){op == 0x07 ? UNDEF : SAME, 0, 0, 0};
            set_reg(&s, reg, fp_reg, ra_reg, rule);
            break;
        }
        case 0x09:
            if (rd_uleb(c, &pos, &reg) || rd_uleb(c, &pos, &other))
                return -1;
            set_reg(&s, reg, fp_reg, ra_reg, (struct cfi_rule){REGISTER, (int64_t)other, 0, 0});
            break;
        case 0x10:
        case 0x16:
            if (rd_uleb(c, &pos, &reg) || rd_uleb(c, &pos, &u) || u > c.n - pos)
                return -1;
            set_reg(&s, reg, fp_reg, ra_reg, (struct cfi_rule){op == 0x10 ? EXPR : VAL_EXPR, 0, (int64_t)pos, (int64_t)u});
            pos += u;
            break;
        case 0x2e:
            if (rd_uleb(c, &pos, &u))
                return -1;
            break;
        case 0x2d:
            break;
        default: /* set_loc and unknown opcodes */
            return -1;
        }
    }
    ROW();
#undef ROW
    *final = s;
    *last_loc = loc;
    return 0;
}

static int overlaps(const uint64_t *sb, const uint64_t *se, uint64_t n, uint64_t begin, uint64_t end) {
    uint64_t lo = 0, hi = n; /* first range starting at or after end */
    while (lo < hi) {
        uint64_t mid = (lo + hi) / 2;
        if (sb[mid] < end)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo > 0 && se[lo - 1] > begin;
}

static int grow_fdes(struct cfi_out *o) {
    uint64_t nc = o->cap_fdes ? o->cap_fdes * 2 : 1024;
    uint64_t *a = realloc(o->begins, nc * 8), *b = a ? realloc(o->ends, nc * 8) : NULL;
    if (!a)
        return -1;
    o->begins = a;
    if (!b)
        return -1;
    o->ends = b;
    uint64_t *c = realloc(o->counts, nc * 8);
    if (!c)
        return -1;
    o->counts = c;
    o->cap_fdes = nc;
    return 0;
}

struct cie_cache {
    uint64_t *keys; /* offset + 1, 0 = empty */
    struct cie *v;
    uint64_t n, nslots;
};

static struct cie *cie_slot(struct cie_cache *cc, uint64_t offset, int *fresh) {
    if (cc->n * 2 >= cc->nslots) {
        uint64_t ns = cc->nslots ? cc->nslots * 2 : 64;
        uint64_t *keys = calloc(ns, 8);
        struct cie *v = calloc(ns, sizeof(*v));
        if (!keys || !v) {
            free(keys), free(v);
            return NULL;
        }
        for (uint64_t i = 0; i < cc->nslots; i++) {
            if (!cc->keys[i])
                continue;
            uint64_t h = (cc->keys[i] * 0x9e3779b97f4a7c15ull) & (ns - 1);
            while (keys[h])
                h = (h + 1) & (ns - 1);
            keys[h] = cc->keys[i], v[h] = cc->v[i];
        }
        free(cc->keys), free(cc->v);
        cc->keys = keys, cc->v = v, cc->nslots = ns;
    }
    uint64_t k = offset + 1, h = (k * 0x9e3779b97f4a7c15ull) & (cc->nslots - 1);
    while (cc->keys[h] && cc->keys[h] != k)
        h = (h + 1) & (cc->nslots - 1);
    *fresh = !cc->keys[h];
    if (*fresh) {
        cc->keys[h] = k;
        memset(&cc->v[h], 0, sizeof(cc->v[h]));
        cc->v[h].offset = offset;
        cc->n++;
    }
    return &cc->v[h];
}

/* The CIE at offset (cfi._cie_at): parsed once; ok = 0 where it is malformed. */
static struct cie *cie_at(struct buf b, struct cie_cache *cc, uint64_t offset, int is_eh) {
    int fresh;
    struct cie *c = cie_slot(cc, offset, &fresh);
    if (!c || !fresh)
        return c;
    uint64_t len, pos = offset;
    unsigned id_size = 4;
    if (rd_fixed(b, pos, 4, &len))
        return c;
    pos += 4;
    if (len == 0xffffffffull) {
        if (rd_fixed(b, pos, 8, &len))
            return c;
        pos += 8;
        id_size = 8;
    }
    if (parse_cie(b, pos + id_size, len > b.n ? b.n : pos + len, is_eh, c)) /* parse_cie clamps to b.n */
        c->ok = 0;
    return c;
}

static const struct cfi_state EMPTY = {-1, 0, 0, -1, {UNSET, 0, 0, 0}, {UNSET, 0, 0, 0}};

/* Every FDE of the section data[0, size) loaded at section_addr: their rows, as cfi.iter_fdes and interp.run
 * give them (each FDE's rows in order, a row at each advance and one at the end). skip_begins/ends (sorted by
 * begin, n_skip of them): FDEs overlapping those ranges are passed over (.debug_frame after .eh_frame).
 * Returns 0, or -2 out of memory (out is then freed). */
EXPORT int cfi_rows(const uint8_t *data, uint64_t size, uint64_t section_addr, int is_eh, unsigned fp_reg,
                    unsigned ra_reg, const uint64_t *skip_begins, const uint64_t *skip_ends, uint64_t n_skip,
                    uint64_t max_rows, struct cfi_out *out);
EXPORT void cfi_free(struct cfi_out *out);
EXPORT void cfi_layout(uint64_t *out);

/* The structs' sizes and a few offsets, for the test that checks native_rows.py's ctypes copies of them. */
EXPORT void cfi_layout(uint64_t *out) {
    out[0] = sizeof(struct cfi_out), out[1] = sizeof(struct cfi_state), out[2] = sizeof(struct cfi_rule);
    out[3] = offsetof(struct cfi_out, first), out[4] = offsetof(struct cfi_out, fdes);
    out[5] = offsetof(struct cfi_out, cap_fdes), out[6] = offsetof(struct cfi_state, ra);
}

EXPORT void cfi_free(struct cfi_out *o) {
    free(o->begins), free(o->ends), free(o->counts), free(o->rel), free(o->state), free(o->states), free(o->first);
    memset(o, 0, sizeof(*o));
}

EXPORT int cfi_rows(const uint8_t *data, uint64_t size, uint64_t section_addr, int is_eh, unsigned fp_reg,
                    unsigned ra_reg, const uint64_t *skip_begins, const uint64_t *skip_ends, uint64_t n_skip,
                    uint64_t max_rows, struct cfi_out *out) {
    struct buf b = {data, size};
    struct rows rows = {0};
    struct states states = {0};
    struct cie_cache cc = {0};
    int rc = 0;
    memset(out, 0, sizeof(*out));
    uint64_t pos = 0;
    while (pos + 4 <= size) {
        uint64_t start = pos, length = 0, id = 0;
        rd_fixed(b, pos, 4, &length);
        pos += 4;
        if (length == 0) {
            if (is_eh)
                break;
            continue;
        }
        int wide = length == 0xffffffffull;
        if (wide) {
            if (rd_fixed(b, pos, 8, &length)) {
                out->errors++;
                break;
            }
            pos += 8;
        }
        uint64_t end = pos + length;
        if (end > size || end < pos) {
            out->errors++;
            break;
        }
        uint64_t id_pos = pos;
        int is_cie;
        if (wide) {
            if (rd_fixed(b, pos, 8, &id)) {
                out->errors++;
                pos = end;
                continue;
            }
            pos += 8;
            is_cie = is_eh ? id == 0 : id == ~0ull;
        } else {
            if (rd_fixed(b, pos, 4, &id)) {
                out->errors++;
                pos = end;
                continue;
            }
            pos += 4;
            is_cie = is_eh ? id == 0 : id == 0xffffffffull;
        }
        if (is_cie) {
            int fresh;
            struct cie *c = cie_slot(&cc, start, &fresh);
            if (!c) {
                rc = -2;
                break;
            }
            if (fresh && parse_cie(b, pos, end, is_eh, c)) {
                c->ok = 0;
                out->errors++;
            }
            pos = end;
            continue;
        }
        uint64_t cie_off = is_eh ? id_pos - id : id;
        struct cie *c = cie_at(b, &cc, cie_off, is_eh);
        if (!c) {
            rc = -2;
            break;
        }
        uint64_t pc_begin, pc_range;
        if (!c->ok) {
            out->errors++;
            pos = end;
            continue;
        }
        if (c->fde_enc == 0x1b) {
            uint64_t rel, rng;
            if (rd_fixed(b, pos, 4, &rel) || rd_fixed(b, pos + 4, 4, &rng)) {
                out->errors++;
                pos = end;
                continue;
            }
            pc_begin = section_addr + pos + (uint64_t)(int64_t)(int32_t)(uint32_t)rel;
            pc_range = rng;
            pos += 8;
        } else if (rd_encoded(b, &pos, c->fde_enc, section_addr + pos, &pc_begin) ||
                   rd_encoded(b, &pos, c->fde_enc & 0x0f, 0, &pc_range)) {
            out->errors++;
            pos = end;
            continue;
        }
        if (c->has_z) {
            uint64_t alen;
            if (rd_uleb(b, &pos, &alen)) {
                out->errors++;
                pos = end;
                continue;
            }
            pos = pos > end || alen > end - pos ? end + 1 : pos + alen; /* past the record: no instructions */
        }
        uint64_t pc_end = pc_begin + pc_range;
        if (pc_end < pc_begin) { /* past 2^64 */
            out->errors++;
            pos = end;
            continue;
        }
        if (!pc_range) {
            pos = end;
            continue;
        }
        if (n_skip && overlaps(skip_begins, skip_ends, n_skip, pc_begin, pc_end)) {
            pos = end;
            continue;
        }
        if (!c->have_state) {
            struct cfi_state fin;
            uint64_t last;
            int r = run(b, c->init_off, c->init_len, &EMPTY, &EMPTY, c->code_align, c->data_align, fp_reg, ra_reg,
                        NULL, &states, &fin, &last);
            if (r == -2) {
                rc = -2;
                break;
            }
            if (r) {
                out->errors++;
                pos = end;
                continue;
            }
            c->state = fin;
            c->have_state = 1;
        }
        uint64_t before = rows.n, last;
        struct cfi_state fin;
        /* an augmentation longer than the record leaves no instructions (Python's empty slice): one row */
        int r = run(b, pos, pos <= end ? end - pos : 0, &c->state, &c->state, c->code_align, c->data_align, fp_reg,
                    ra_reg, &rows, &states, &fin, &last);
        if (r == -2) {
            rc = -2;
            break;
        }
        if (r) {
            rows.n = before;
            out->errors++;
            pos = end;
            continue;
        }
        if (out->fdes == out->cap_fdes && grow_fdes(out)) {
            rc = -2;
            break;
        }
        out->begins[out->fdes] = pc_begin;
        out->ends[out->fdes] = pc_end;
        out->counts[out->fdes] = rows.n - before;
        out->fdes++;
        if (rows.n > max_rows) {
            out->over_cap = 1;
            break;
        }
        pos = end;
    }
    free(cc.keys), free(cc.v), free(states.slots);
    out->rel = rows.rel, out->state = rows.state, out->rows = rows.n;
    out->states = states.v, out->nstates = states.n;
    if (!rc && states.n) { /* Python numbers the rules in the order their rows come */
        out->first = malloc(states.n * sizeof(*out->first));
        if (!out->first) {
            rc = -2;
        } else {
            memset(out->first, 0xff, states.n * sizeof(*out->first));
            for (uint64_t i = rows.n; i-- > 0;)
                out->first[rows.state[i]] = i;
        }
    }
    if (rc)
        cfi_free(out);
    return rc;
}
