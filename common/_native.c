/* Native fast paths of the record format's per-message loops (see common/native.py).
 *
 * Each function does exactly what a pure-Python function of the store does, on the common
 * inputs only: whenever an input is unusual (a type, a range, a cache miss, a record that is not
 * a plain valid IPv4 record) it returns None, or stops early, and the Python code takes over.
 * So every error message and every rare case stays in Python, and tests compare the two paths
 * byte for byte (tests/store/test_native.py).
 *
 * CRC32C is computed here (SSE4.2 instruction where the CPU has it, tables otherwise); the
 * store's Python code uses the crc32c package, and the tests check that both agree.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MESSAGE_MAGIC_CODE ((int32_t)0xDAA320A7)
#define NO_QUEUE_OFFSET_BIT 0x4 /* TRANSACTION_PREPARED: no queue offset, no CQ entry */
#define BORN_HOST_V6 0x10
#define STORE_HOST_V6 0x20
#define HEADER_V4 88 /* record header up to and including BODY length, both hosts IPv4 */
#define INDEX_HEADER_SIZE 40
#define HASH_SLOT_SIZE 4
#define INDEX_SIZE 20
#define INT32_MAX_ 0x7FFFFFFF

/* -- CRC32C ------------------------------------------------------------------------------- */
static uint32_t crc_table[8][256];
static int crc_hw_ok;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int k = 1; k < 8; k++)
            crc_table[k][i] = (crc_table[k - 1][i] >> 8) ^ crc_table[0][crc_table[k - 1][i] & 0xFF];
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    crc_hw_ok = __builtin_cpu_supports("sse4.2") != 0;
#endif
}

static uint32_t crc_sw(uint32_t c, const uint8_t *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) {
        c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
        n--;
    }
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^
            crc_table[5][(lo >> 16) & 0xFF] ^ crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^
            crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const uint8_t *p, size_t n) {
    uint64_t c64;
    while (n && ((uintptr_t)p & 7)) {
        c = __builtin_ia32_crc32qi(c, *p++);
        n--;
    }
    c64 = c;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c64 = __builtin_ia32_crc32di(c64, v);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--)
        c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}
#endif

/* CRC32C of p[0:n] continuing from a finished CRC (0 to start), as crc32c.crc32c(data, crc). */
static uint32_t crc32c_extend(uint32_t crc, const uint8_t *p, size_t n) {
    uint32_t c = ~crc;
#if defined(__x86_64__)
    if (crc_hw_ok)
        return ~crc_hw(c, p, n);
#endif
    return ~crc_sw(c, p, n);
}

/* -- big-endian fields -------------------------------------------------------------------- */
static inline void put16(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}
static inline void put32(uint8_t *p, uint32_t v) {
    v = __builtin_bswap32(v);
    memcpy(p, &v, 4);
}
static inline void put64(uint8_t *p, uint64_t v) {
    v = __builtin_bswap64(v);
    memcpy(p, &v, 8);
}
static inline uint32_t get32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return __builtin_bswap32(v);
}
static inline uint64_t get64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return __builtin_bswap64(v);
}

/* -- interned names ----------------------------------------------------------------------- */
static PyObject *s_topic, *s_body, *s_properties, *s_queue_id, *s_born_host, *s_sys_flag,
    *s_flag, *s_born_timestamp, *s_reconsume_times, *s_prepared_transaction_offset, *s_TAGS,
    *s_KEYS, *s_UNIQ_KEY, *s_DELAY, *s_empty, *s_tags, *s_keys, *s_delay_level;

/* An exact int in [lo, hi] into *out; 0 (no error set) when it is not one. */
static int int_in(PyObject *o, long long lo, long long hi, long long *out) {
    int overflow;
    long long v;
    if (o == NULL || !PyLong_CheckExact(o))
        return 0;
    v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    if (v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

static int attr_int(PyObject *obj, PyObject *name, long long lo, long long hi, long long *out) {
    PyObject *o = PyObject_GetAttr(obj, name);
    int ok;
    if (o == NULL) {
        PyErr_Clear();
        return 0;
    }
    ok = int_in(o, lo, hi, out);
    Py_DECREF(o);
    return ok;
}

/* Java's String.hashCode() over UTF-16 code units, as a signed 32-bit int (codec.tags_code). */
static long java_string_hash(PyObject *s) {
    uint32_t h = 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 ch = PyUnicode_READ(kind, data, i);
        if (ch > 0xFFFF) {
            ch -= 0x10000;
            h = 31 * h + (0xD800 + (ch >> 10));
            h = 31 * h + (0xDC00 + (ch & 0x3FF));
        } else {
            h = 31 * h + ch;
        }
    }
    return (long)(int32_t)h;
}

/* Takes a new container out of the garbage collector's lists. The tuples and lists made here
 * hold strings, numbers, bytes and messages and are never part of a reference cycle, so the
 * collector need not walk them: at hundreds of thousands a second, it otherwise spent ~10 % of
 * the appending process's time doing so (measured with perf). */
static PyObject *untracked(PyObject *o) {
    if (o != NULL)
        PyObject_GC_UnTrack(o);
    return o;
}

/* A tuple of n items; `borrowed` has bit i set where items[i] is a borrowed reference (the
 * others are new references, stolen; a NULL one fails the whole tuple). */
static PyObject *tuple_of(PyObject **items, int n, unsigned borrowed) {
    PyObject *t = NULL;
    int ok = 1;
    for (int i = 0; i < n; i++)
        if (items[i] == NULL)
            ok = 0;
    if (ok)
        t = PyTuple_New(n);
    for (int i = 0; i < n; i++) {
        if (items[i] == NULL)
            continue;
        if (borrowed & (1u << i))
            Py_INCREF(items[i]);
        if (t != NULL)
            PyTuple_SET_ITEM(t, i, items[i]);
        else
            Py_DECREF(items[i]);
    }
    return t;
}

/* -- encode: CommitLog.encode ------------------------------------------------------------- */
/* One message's EncodedMessage tuple, or NULL (error cleared) when Python must do it. */
static PyObject *encode_one(PyObject *msg, long long store_flag, PyObject *hosts,
                            PyObject *prefixes, Py_ssize_t max_body, Py_ssize_t max_total,
                            Py_ssize_t max_props) {
    PyObject *topic = NULL, *body = NULL, *props = NULL, *queue_id = NULL, *born = NULL;
    PyObject *tail = NULL, *key = NULL, *result = NULL;
    PyObject *keys = s_empty, *uniq = Py_None;
    PyObject *prefix, *born_bytes, *k, *v;
    long long qid, sys_flag;
    long code = 0;
    Py_ssize_t plen = 0, pos, body_len, prefix_len, tail_len, total, header;
    uint8_t *w;

    topic = PyObject_GetAttr(msg, s_topic);
    body = PyObject_GetAttr(msg, s_body);
    props = PyObject_GetAttr(msg, s_properties);
    queue_id = PyObject_GetAttr(msg, s_queue_id);
    born = PyObject_GetAttr(msg, s_born_host);
    if (!topic || !body || !props || !queue_id || !born || !PyUnicode_CheckExact(topic) ||
        !PyBytes_CheckExact(body) || !PyDict_CheckExact(props) ||
        !int_in(queue_id, 0, INT32_MAX_, &qid) ||
        !attr_int(msg, s_sys_flag, 0, INT32_MAX_, &sys_flag))
        goto done;
    body_len = PyBytes_GET_SIZE(body);
    prefix = PyDict_GetItemWithError(prefixes, topic);
    if (prefix == NULL || !PyBytes_CheckExact(prefix) || body_len > max_body)
        goto done;
    born_bytes = PyDict_GetItemWithError(hosts, born);
    if (born_bytes == NULL || !PyBytes_CheckExact(born_bytes))
        goto done;
    if (PyDict_GET_SIZE(props)) {
        PyObject *tags;
        if (PyDict_GetItemWithError(props, s_DELAY) != NULL) /* delayed: Python's path */
            goto done;
        pos = 0;
        while (PyDict_Next(props, &pos, &k, &v)) {
            Py_ssize_t kl, vl;
            if (!PyUnicode_CheckExact(k) || !PyUnicode_CheckExact(v) ||
                PyUnicode_AsUTF8AndSize(k, &kl) == NULL || PyUnicode_AsUTF8AndSize(v, &vl) == NULL)
                goto done;
            plen += kl + vl + 2;
        }
        if (plen > max_props)
            goto done;
        tags = PyDict_GetItemWithError(props, s_TAGS);
        if (tags != NULL) {
            if (!PyUnicode_CheckExact(tags))
                goto done;
            code = java_string_hash(tags);
        }
        keys = PyDict_GetItemWithError(props, s_KEYS);
        if (keys == NULL)
            keys = s_empty;
        uniq = PyDict_GetItemWithError(props, s_UNIQ_KEY);
        if (uniq == NULL)
            uniq = Py_None;
        if (!PyUnicode_CheckExact(keys) || (uniq != Py_None && !PyUnicode_CheckExact(uniq)))
            goto done;
    }
    sys_flag |= store_flag | (PyBytes_GET_SIZE(born_bytes) == 20 ? BORN_HOST_V6 : 0);
    header = HEADER_V4 + (sys_flag & BORN_HOST_V6 ? 12 : 0) + (sys_flag & STORE_HOST_V6 ? 12 : 0);
    prefix_len = PyBytes_GET_SIZE(prefix);
    tail_len = prefix_len + 2 + plen;
    total = header + body_len + tail_len;
    if (total > max_total)
        goto done;
    tail = PyBytes_FromStringAndSize(NULL, tail_len);
    if (tail == NULL)
        goto done;
    w = (uint8_t *)PyBytes_AS_STRING(tail);
    memcpy(w, PyBytes_AS_STRING(prefix), prefix_len);
    w += prefix_len;
    put16(w, (uint32_t)plen);
    w += 2;
    pos = 0;
    while (PyDict_Next(props, &pos, &k, &v)) {
        Py_ssize_t kl, vl;
        const char *ks = PyUnicode_AsUTF8AndSize(k, &kl), *vs = PyUnicode_AsUTF8AndSize(v, &vl);
        memcpy(w, ks, kl);
        w += kl;
        *w++ = 1;
        memcpy(w, vs, vl);
        w += vl;
        *w++ = 2;
    }
    key = untracked(PyTuple_Pack(2, topic, queue_id));
    if (key == NULL)
        goto done;
    {
        uint32_t crc = crc32c_extend(0, (const uint8_t *)PyBytes_AS_STRING(body), body_len);
        PyObject *items[11] = {msg, PyLong_FromLongLong(sys_flag),
                               PyLong_FromUnsignedLong(crc & 0x7FFFFFFF), tail,
                               PyLong_FromSsize_t(total), born_bytes, PyLong_FromLong(code),
                               keys, uniq, PyLong_FromLong(0), key};
        result = untracked(tuple_of(items, 11, 0x1 | 0x8 | 0x20 | 0x80 | 0x100 | 0x400));
    }
done:
    if (result == NULL)
        PyErr_Clear();
    Py_XDECREF(topic);
    Py_XDECREF(body);
    Py_XDECREF(props);
    Py_XDECREF(queue_id);
    Py_XDECREF(born);
    Py_XDECREF(tail);
    Py_XDECREF(key);
    return result;
}

static PyObject *encode(PyObject *self, PyObject *args) {
    PyObject *msgs, *hosts, *prefixes, *out;
    long long store_flag;
    Py_ssize_t max_body, max_total, max_props;
    if (!PyArg_ParseTuple(args, "O!LO!O!nnn", &PyList_Type, &msgs, &store_flag, &PyDict_Type,
                          &hosts, &PyDict_Type, &prefixes, &max_body, &max_total, &max_props))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(msgs);
    out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = encode_one(PyList_GET_ITEM(msgs, i), store_flag, hosts, prefixes, max_body,
                                 max_total, max_props);
        if (e == NULL) {
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        PyList_SET_ITEM(out, i, e);
    }
    return out;
}

/* -- pack: commitlog._pack_records -------------------------------------------------------- */
typedef struct {
    long long total, sys_flag, crc, queue_id, flag, born_ts, reconsume, prepared;
    PyObject *tail, *born_host, *key; /* borrowed from the encoded tuple */
    PyObject *body;                   /* the message's body: a reference held until the end */
} PackRec;

static PyObject *pack(PyObject *self, PyObject *args) {
    PyObject *encoded, *table, *store_host, *phys_out, *qoff_out, *data = NULL, *result = NULL;
    Py_ssize_t start, n, count = 0, i;
    long long phys, room, now, size = 0;
    PackRec *recs = NULL;
    if (!PyArg_ParseTuple(args, "O!nO!LLLO!O!O!", &PyList_Type, &encoded, &start, &PyDict_Type,
                          &table, &phys, &room, &now, &PyBytes_Type, &store_host, &PyList_Type,
                          &phys_out, &PyList_Type, &qoff_out))
        return NULL;
    n = PyList_GET_SIZE(encoded);
    if (start < 0 || start > n) {
        PyErr_SetString(PyExc_IndexError, "start outside the list");
        return NULL;
    }
    recs = PyMem_Calloc(n - start + 1, sizeof(PackRec));
    if (recs == NULL)
        return PyErr_NoMemory();
    /* Pass 1: what fits in `room`, every field checked; nothing changed yet. */
    for (i = start; i < n; i++) {
        PyObject *e = PyList_GET_ITEM(encoded, i), *msg;
        PackRec *r = &recs[count];
        if (!PyTuple_CheckExact(e) || PyTuple_GET_SIZE(e) != 11 ||
            !int_in(PyTuple_GET_ITEM(e, 4), 0, INT32_MAX_, &r->total))
            goto fallback;
        if (r->total > room)
            break;
        msg = PyTuple_GET_ITEM(e, 0);
        r->tail = PyTuple_GET_ITEM(e, 3);
        r->born_host = PyTuple_GET_ITEM(e, 5);
        r->key = PyTuple_GET_ITEM(e, 10);
        r->body = PyObject_GetAttr(msg, s_body);
        if (!int_in(PyTuple_GET_ITEM(e, 1), 0, INT32_MAX_, &r->sys_flag) ||
            !int_in(PyTuple_GET_ITEM(e, 2), 0, INT32_MAX_, &r->crc) ||
            !PyBytes_CheckExact(r->tail) || !PyBytes_CheckExact(r->born_host) ||
            !PyTuple_CheckExact(r->key) || r->body == NULL || !PyBytes_CheckExact(r->body) ||
            !attr_int(msg, s_queue_id, INT32_MIN, INT32_MAX_, &r->queue_id) ||
            !attr_int(msg, s_flag, INT32_MIN, INT32_MAX_, &r->flag) ||
            !attr_int(msg, s_born_timestamp, LLONG_MIN, LLONG_MAX, &r->born_ts) ||
            !attr_int(msg, s_reconsume_times, INT32_MIN, INT32_MAX_, &r->reconsume) ||
            !attr_int(msg, s_prepared_transaction_offset, LLONG_MIN, LLONG_MAX, &r->prepared))
            goto fallback;
        {
            Py_ssize_t header = HEADER_V4 + (r->sys_flag & BORN_HOST_V6 ? 12 : 0) +
                                (r->sys_flag & STORE_HOST_V6 ? 12 : 0);
            if (header + PyBytes_GET_SIZE(r->body) + PyBytes_GET_SIZE(r->tail) != r->total ||
                PyBytes_GET_SIZE(r->body) > INT32_MAX_)
                goto fallback;
        }
        room -= r->total;
        size += r->total;
        count++;
    }
    data = PyBytes_FromStringAndSize(NULL, size);
    if (data == NULL)
        goto out;
    /* Pass 2: queue offsets and the records. */
    {
        uint8_t *w = (uint8_t *)PyBytes_AS_STRING(data);
        for (Py_ssize_t j = 0; j < count; j++) {
            PackRec *r = &recs[j];
            long long qoff = 0;
            Py_ssize_t body_len = PyBytes_GET_SIZE(r->body);
            PyObject *o;
            if (!(r->sys_flag & NO_QUEUE_OFFSET_BIT)) {
                PyObject *next;
                o = PyDict_GetItemWithError(table, r->key);
                if (o == NULL && PyErr_Occurred())
                    goto out;
                if (o != NULL && !int_in(o, LLONG_MIN, LLONG_MAX - 1, &qoff)) {
                    PyErr_SetString(PyExc_TypeError, "queue offset table holds a non-int");
                    goto out;
                }
                next = PyLong_FromLongLong(qoff + 1);
                if (next == NULL || PyDict_SetItem(table, r->key, next) < 0) {
                    Py_XDECREF(next);
                    goto out;
                }
                Py_DECREF(next);
            }
            put32(w, (uint32_t)r->total);
            put32(w + 4, (uint32_t)MESSAGE_MAGIC_CODE);
            put32(w + 8, (uint32_t)r->crc);
            put32(w + 12, (uint32_t)r->queue_id);
            put32(w + 16, (uint32_t)r->flag);
            put64(w + 20, (uint64_t)qoff);
            put64(w + 28, (uint64_t)phys);
            put32(w + 36, (uint32_t)r->sys_flag);
            put64(w + 40, (uint64_t)r->born_ts);
            w += 48;
            /* Hosts as struct's "{n}s": padded with zeros or cut to the field's size. */
            {
                Py_ssize_t field = r->sys_flag & BORN_HOST_V6 ? 20 : 8;
                Py_ssize_t len = PyBytes_GET_SIZE(r->born_host);
                memset(w, 0, field);
                memcpy(w, PyBytes_AS_STRING(r->born_host), len < field ? len : field);
                w += field;
                put64(w, (uint64_t)now);
                w += 8;
                field = r->sys_flag & STORE_HOST_V6 ? 20 : 8;
                len = PyBytes_GET_SIZE(store_host);
                memset(w, 0, field);
                memcpy(w, PyBytes_AS_STRING(store_host), len < field ? len : field);
                w += field;
            }
            put32(w, (uint32_t)r->reconsume);
            put64(w + 4, (uint64_t)r->prepared);
            put32(w + 12, (uint32_t)body_len);
            w += 16;
            memcpy(w, PyBytes_AS_STRING(r->body), body_len);
            w += body_len;
            memcpy(w, PyBytes_AS_STRING(r->tail), PyBytes_GET_SIZE(r->tail));
            w += PyBytes_GET_SIZE(r->tail);
            o = PyLong_FromLongLong(phys);
            if (o == NULL || PyList_Append(phys_out, o) < 0) {
                Py_XDECREF(o);
                goto out;
            }
            Py_DECREF(o);
            o = PyLong_FromLongLong(qoff);
            if (o == NULL || PyList_Append(qoff_out, o) < 0) {
                Py_XDECREF(o);
                goto out;
            }
            Py_DECREF(o);
            phys += r->total;
        }
    }
    result = Py_BuildValue("(OnL)", data, start + count, phys);
    goto out;
fallback:
    result = Py_None;
    Py_INCREF(result);
    PyErr_Clear();
out:
    Py_XDECREF(data);
    for (i = 0; i <= count; i++) /* recs[count]: where pass 1 stopped, maybe half read */
        Py_XDECREF(recs[i].body);
    PyMem_Free(recs);
    return result;
}

/* -- gather: reput._gather_records --------------------------------------------------------- */
static PyObject *gather(PyObject *self, PyObject *args) {
    PyObject *encoded, *phys_offsets, *queue_offsets, *queues, *index_items, *add_entry;
    PyObject *ts;
    int index_on;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!pO", &PyList_Type, &encoded, &PyList_Type,
                          &phys_offsets, &PyList_Type, &queue_offsets, &PyLong_Type, &ts,
                          &PyDict_Type, &queues, &PyList_Type, &index_items, &index_on,
                          &add_entry))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(encoded);
    if (PyList_GET_SIZE(phys_offsets) != n || PyList_GET_SIZE(queue_offsets) != n) {
        PyErr_SetString(PyExc_ValueError, "encoded, offsets and queue offsets differ in length");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = PyList_GET_ITEM(encoded, i);
        PyObject *phys = PyList_GET_ITEM(phys_offsets, i), *qoff = PyList_GET_ITEM(queue_offsets, i);
        PyObject *size, *code, *keys, *uniq, *delay, *key;
        long long sys_flag, qoff_v, first_v;
        if (!PyTuple_CheckExact(e) || PyTuple_GET_SIZE(e) != 11 ||
            !int_in(PyTuple_GET_ITEM(e, 1), LLONG_MIN, LLONG_MAX, &sys_flag)) {
            PyErr_SetString(PyExc_TypeError, "not an encoded message");
            return NULL;
        }
        size = PyTuple_GET_ITEM(e, 4);
        code = PyTuple_GET_ITEM(e, 6);
        keys = PyTuple_GET_ITEM(e, 7);
        uniq = PyTuple_GET_ITEM(e, 8);
        delay = PyTuple_GET_ITEM(e, 9);
        key = PyTuple_GET_ITEM(e, 10);
        if (!(sys_flag & NO_QUEUE_OFFSET_BIT)) {
            PyObject *q, *owned_code = NULL;
            int is_delay = PyObject_IsTrue(delay);
            if (is_delay < 0)
                return NULL;
            if (is_delay) {
                owned_code = code = PyNumber_Add(ts, delay);
                if (code == NULL)
                    return NULL;
            }
            q = PyDict_GetItemWithError(queues, key);
            if (q == NULL && PyErr_Occurred()) {
                Py_XDECREF(owned_code);
                return NULL;
            }
            if (q != NULL && PyList_CheckExact(q) && PyList_GET_SIZE(q) > 0 &&
                int_in(qoff, LLONG_MIN, LLONG_MAX, &qoff_v) &&
                int_in(PyList_GET_ITEM(q, 0), LLONG_MIN, LLONG_MAX, &first_v) &&
                first_v + PyList_GET_SIZE(q) / 3 == qoff_v) {
                if (PyList_Append(q, phys) < 0 || PyList_Append(q, size) < 0 ||
                    PyList_Append(q, code) < 0) {
                    Py_XDECREF(owned_code);
                    return NULL;
                }
            } else {
                PyObject *r = PyObject_CallFunctionObjArgs(add_entry, key, qoff, phys, size, code,
                                                           NULL);
                if (r == NULL) {
                    Py_XDECREF(owned_code);
                    return NULL;
                }
                Py_DECREF(r);
            }
            Py_XDECREF(owned_code);
        }
        if (index_on) {
            int has_keys = PyObject_IsTrue(keys), has_uniq = PyObject_IsTrue(uniq);
            PyObject *names = NULL, *item;
            if (has_keys < 0 || has_uniq < 0)
                return NULL;
            if (has_keys) {
                names = untracked(PyObject_CallMethod(keys, "split", NULL));
                if (names == NULL)
                    return NULL;
                if (has_uniq && PyList_Append(names, uniq) < 0) {
                    Py_DECREF(names);
                    return NULL;
                }
            } else if (has_uniq) {
                names = untracked(PyTuple_Pack(1, uniq));
                if (names == NULL)
                    return NULL;
            }
            if (names != NULL) {
                if (!PyTuple_CheckExact(key) || PyTuple_GET_SIZE(key) < 1) {
                    Py_DECREF(names);
                    PyErr_SetString(PyExc_TypeError, "queue key is not a tuple");
                    return NULL;
                }
                item = untracked(
                    Py_BuildValue("(ONOO)", PyTuple_GET_ITEM(key, 0), names, phys, ts));
                if (item == NULL || PyList_Append(index_items, item) < 0) {
                    Py_XDECREF(item);
                    return NULL;
                }
                Py_DECREF(item);
            }
        }
    }
    Py_RETURN_NONE;
}

/* -- index_keys: index.index_keys ---------------------------------------------------------- */
/* state: [count, slot_count, begin_ts, begin_phy, end_ts, end_phy, last_phy] (updated). */
#define STATE_LEN 7

typedef struct {
    uint32_t hash;
    long long phy, ts;
} IndexKey;

/* Pass 1 (with the GIL) turns the keys into (hash, offset, time) records; pass 2 writes them
 * into the mapping without the GIL: its page faults and cache misses (random slots of a
 * 400 MB file) then overlap with the appending thread instead of stopping it. */
static PyObject *index_keys(PyObject *self, PyObject *args) {
    PyObject *mm, *items, *state;
    Py_ssize_t base, slot_num, limit, i, k, n, nkeys_out = 0, cap = 0;
    long long st[STATE_LEN];
    Py_buffer view;
    IndexKey *recs = NULL;
    int full = 0;
    if (!PyArg_ParseTuple(args, "OnnnO!nnO!", &mm, &base, &slot_num, &limit, &PyList_Type,
                          &items, &i, &k, &PyList_Type, &state))
        return NULL;
    if (PyList_GET_SIZE(state) != STATE_LEN || slot_num < 1) {
        PyErr_SetString(PyExc_ValueError, "bad index state");
        return NULL;
    }
    for (int j = 0; j < STATE_LEN; j++)
        if (!int_in(PyList_GET_ITEM(state, j), LLONG_MIN, LLONG_MAX, &st[j])) {
            PyErr_SetString(PyExc_TypeError, "index state holds a non-int");
            return NULL;
        }
    long long count = st[0], slot_count = st[1], begin_ts = st[2], begin_phy = st[3];
    long long end_ts = st[4], end_phy = st[5], last_phy = st[6];
    long long room = limit - count;
    n = PyList_GET_SIZE(items);
    /* Pass 1 */
    for (; i < n; i++, k = 0) {
        PyObject *item = PyList_GET_ITEM(items, i), *topic, *keys;
        long long phy, ts;
        Py_ssize_t topic_len, nkeys;
        const char *topic_s;
        uint32_t topic_crc;
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 4 ||
            !int_in(PyTuple_GET_ITEM(item, 2), LLONG_MIN, LLONG_MAX, &phy) ||
            !int_in(PyTuple_GET_ITEM(item, 3), LLONG_MIN, LLONG_MAX, &ts)) {
            PyErr_SetString(PyExc_TypeError, "index item is not (topic, keys, offset, time)");
            goto error;
        }
        if (phy <= last_phy)
            continue;
        topic = PyTuple_GET_ITEM(item, 0);
        keys = PyTuple_GET_ITEM(item, 1);
        if (!PyUnicode_Check(topic) || !(PyList_CheckExact(keys) || PyTuple_CheckExact(keys))) {
            PyErr_SetString(PyExc_TypeError, "index item is not (topic, keys, offset, time)");
            goto error;
        }
        topic_s = PyUnicode_AsUTF8AndSize(topic, &topic_len);
        if (topic_s == NULL)
            goto error;
        topic_crc = crc32c_extend(crc32c_extend(0, (const uint8_t *)topic_s, topic_len),
                                  (const uint8_t *)"#", 1);
        nkeys = PySequence_Fast_GET_SIZE(keys);
        for (; k < nkeys; k++) {
            PyObject *key = PySequence_Fast_GET_ITEM(keys, k);
            Py_ssize_t key_len;
            const char *key_s;
            if (!PyUnicode_Check(key)) {
                PyErr_SetString(PyExc_TypeError, "index key is not a str");
                goto error;
            }
            if (PyUnicode_GET_LENGTH(key) == 0)
                continue;
            if (nkeys_out >= room) { /* full: Python seals it and rolls to a new file */
                full = 1;
                goto write;
            }
            key_s = PyUnicode_AsUTF8AndSize(key, &key_len);
            if (key_s == NULL)
                goto error;
            if (nkeys_out == cap) {
                Py_ssize_t new_cap = cap ? cap * 2 : 256;
                IndexKey *grown = PyMem_Realloc(recs, new_cap * sizeof(IndexKey));
                if (grown == NULL) {
                    PyErr_NoMemory();
                    goto error;
                }
                recs = grown;
                cap = new_cap;
            }
            recs[nkeys_out].hash =
                crc32c_extend(topic_crc, (const uint8_t *)key_s, key_len) & INT32_MAX_;
            recs[nkeys_out].phy = phy;
            recs[nkeys_out].ts = ts;
            nkeys_out++;
        }
        last_phy = phy;
    }
    k = 0;
write:
    if (PyObject_GetBuffer(mm, &view, PyBUF_WRITABLE) < 0)
        goto error;
    if ((Py_ssize_t)(INDEX_HEADER_SIZE + slot_num * HASH_SLOT_SIZE) > view.len ||
        base + limit * INDEX_SIZE > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "index file smaller than its layout");
        goto error;
    }
    /* Pass 2 */
    Py_BEGIN_ALLOW_THREADS
    uint8_t *buf = view.buf;
    for (Py_ssize_t j = 0; j < nkeys_out; j++) {
        IndexKey *r = &recs[j];
        Py_ssize_t slot_pos = INDEX_HEADER_SIZE + (Py_ssize_t)(r->hash % slot_num) * HASH_SLOT_SIZE;
        uint32_t prev = get32(buf + slot_pos);
        long long diff;
        if (prev >= count) /* never in a sound file; keeps chains pointing backwards */
            prev = 0;
        if (count > 1) {
            long long d = r->ts - begin_ts; /* Python's floor division */
            diff = d >= 0 ? d / 1000 : -((-d + 999) / 1000);
            if (diff < 0)
                diff = 0;
            else if (diff > INT32_MAX_)
                diff = INT32_MAX_;
        } else {
            begin_ts = r->ts;
            begin_phy = r->phy;
            diff = 0;
        }
        uint8_t *entry = buf + base + count * INDEX_SIZE;
        put32(entry, r->hash);
        put64(entry + 4, (uint64_t)r->phy);
        put32(entry + 12, (uint32_t)diff);
        put32(entry + 16, prev);
        put32(buf + slot_pos, (uint32_t)count); /* after the entry: readers follow slots */
        if (!prev)
            slot_count++;
        count++;
        end_ts = r->ts;
        end_phy = r->phy;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyMem_Free(recs);
    {
        long long now_st[STATE_LEN] = {count, slot_count, begin_ts, begin_phy, end_ts, end_phy,
                                       last_phy};
        for (int j = 0; j < STATE_LEN; j++) {
            PyObject *o = PyLong_FromLongLong(now_st[j]);
            if (o == NULL || PyList_SetItem(state, j, o) < 0) /* steals o */
                return NULL;
        }
    }
    return Py_BuildValue("(nn)", full ? i : n, full ? k : (Py_ssize_t)0);
error:
    PyMem_Free(recs);
    return NULL;
}

/* -- scan: scanning.scan_plain_records ---------------------------------------------------- */
static PyObject *scan(PyObject *self, PyObject *args) {
    PyObject *mm, *topics, *run;
    Py_ssize_t pos, size, max_props, max_records;
    long long base;
    Py_buffer view;
    PyObject *last_raw = NULL, *last_topic = NULL;
    if (!PyArg_ParseTuple(args, "OnnLO!nnO!", &mm, &pos, &size, &base, &PyDict_Type, &topics,
                          &max_props, &max_records, &PyList_Type, &run))
        return NULL;
    if (PyObject_GetBuffer(mm, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *buf = view.buf;
    if (size > view.len)
        size = view.len;
    while (max_records-- > 0 && pos >= 0 && pos + HEADER_V4 <= size) {
        const uint8_t *r = buf + pos;
        long long total = (int32_t)get32(r), magic = (int32_t)get32(r + 4);
        long long crc = (int32_t)get32(r + 8), queue_id = (int32_t)get32(r + 12);
        long long queue_offset = (int64_t)get64(r + 20), phys = (int64_t)get64(r + 28);
        long long sys_flag = (int32_t)get32(r + 36), body_len = (int32_t)get32(r + 84);
        long long end = pos + total, p = pos + HEADER_V4 + body_len;
        if (!(magic == MESSAGE_MAGIC_CODE && !(sys_flag & 0x30) && phys == base + pos &&
              end <= size && body_len >= 0 && p + 3 <= end && queue_id >= 0 && queue_offset >= 0 &&
              (crc32c_extend(0, buf + pos + HEADER_V4, body_len) & 0x7FFFFFFF) == crc))
            break;
        long long topic_len = buf[p], props_pos = p + 3 + topic_len, props_len = end - props_pos;
        if (props_len < 0 || props_len > max_props ||
            ((long long)buf[props_pos - 2] << 8 | buf[props_pos - 1]) != props_len)
            break;
        if (props_len) {
            if (buf[end - 1] != 2)
                break;
            for (long long j = props_pos; j < end; j++)
                if (buf[j] & 0x80)
                    goto stop; /* not ASCII: Python checks the UTF-8 */
        }
        if (last_raw == NULL || PyBytes_GET_SIZE(last_raw) != topic_len ||
            memcmp(PyBytes_AS_STRING(last_raw), buf + p + 1, topic_len) != 0) {
            PyObject *raw = PyBytes_FromStringAndSize((const char *)buf + p + 1, topic_len);
            PyObject *topic;
            if (raw == NULL)
                goto fail;
            topic = PyDict_GetItemWithError(topics, raw);
            if (topic == NULL) {
                Py_DECREF(raw);
                if (PyErr_Occurred())
                    goto fail;
                break; /* a topic not seen yet: Python checks it */
            }
            Py_XDECREF(last_raw);
            Py_XDECREF(last_topic);
            last_raw = raw;
            last_topic = topic;
            Py_INCREF(topic);
        }
        PyObject *fields[7] = {PyLong_FromSsize_t(pos), PyLong_FromLongLong(phys),
                               PyLong_FromLongLong(total), PyLong_FromLongLong(queue_id),
                               PyLong_FromLongLong(queue_offset), last_topic,
                               PyLong_FromLongLong(sys_flag)};
        PyObject *rec = untracked(tuple_of(fields, 7, 1u << 5));
        if (rec == NULL || PyList_Append(run, rec) < 0) {
            Py_XDECREF(rec);
            goto fail;
        }
        Py_DECREF(rec);
        pos = (Py_ssize_t)end;
    }
stop:
    PyBuffer_Release(&view);
    Py_XDECREF(last_raw);
    Py_XDECREF(last_topic);
    return PyLong_FromSsize_t(pos);
fail:
    PyBuffer_Release(&view);
    Py_XDECREF(last_raw);
    Py_XDECREF(last_topic);
    return NULL;
}

/* -- decode_pulled: mqclient.codec.decode_records ------------------------------------------ */
static PyObject *host_text(PyObject *hosts, PyObject *host_of, const uint8_t *raw, Py_ssize_t n) {
    PyObject *key = PyBytes_FromStringAndSize((const char *)raw, n), *text;
    if (key == NULL)
        return NULL;
    text = PyDict_GetItemWithError(hosts, key);
    if (text != NULL)
        Py_INCREF(text);
    else if (!PyErr_Occurred())
        text = PyObject_CallOneArg(host_of, key);
    Py_DECREF(key);
    return text;
}

static PyObject *hex_id(const uint8_t *host, Py_ssize_t host_len, long long phys) {
    static const char digits[] = "0123456789ABCDEF";
    uint8_t raw[28];
    char text[56];
    memcpy(raw, host, host_len);
    put64(raw + host_len, (uint64_t)phys);
    for (Py_ssize_t j = 0; j < host_len + 8; j++) {
        text[2 * j] = digits[raw[j] >> 4];
        text[2 * j + 1] = digits[raw[j] & 0xF];
    }
    return PyUnicode_DecodeASCII(text, 2 * (host_len + 8), NULL);
}

/* None (error cleared) when Python must decode: it raises the right error for bad records. */
static PyObject *decode_pulled(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *broker, *cls, *hosts, *host_of, *out = NULL, *topic = NULL;
    const uint8_t *last_topic_raw = NULL;
    Py_ssize_t last_topic_len = -1;
    if (!PyArg_ParseTuple(args, "y*OOO!O", &view, &broker, &cls, &PyDict_Type, &hosts,
                          &host_of))
        return NULL;
    const uint8_t *buf = view.buf;
    Py_ssize_t pos = 0, end = view.len;
    out = PyList_New(0);
    if (out == NULL)
        goto fail;
    while (pos < end) {
        PyObject *a[18] = {NULL};
        PyObject *tags = NULL, *keys = NULL, *uniq = NULL, *props = NULL, *msg;
        Py_ssize_t header, total, body_len, born_len, store_len, p, rec_end;
        int ok = 0;
        if (pos + 40 > end)
            goto fallback;
        uint32_t sys_flag = get32(buf + pos + 36);
        born_len = sys_flag & BORN_HOST_V6 ? 20 : 8;
        store_len = sys_flag & STORE_HOST_V6 ? 20 : 8;
        header = HEADER_V4 + born_len + store_len - 16;
        if (pos + header > end)
            goto fallback;
        total = (int32_t)get32(buf + pos);
        if ((int32_t)get32(buf + pos + 4) != MESSAGE_MAGIC_CODE || total <= header ||
            pos + total > end)
            goto fallback;
        rec_end = pos + total;
        const uint8_t *r = buf + pos;
        if ((int64_t)get64(r + 28) < 0) /* Python's offsetMsgId refuses it */
            goto fallback;
        const uint8_t *born_host = r + 48, *store_host = r + 56 + born_len;
        long long store_ts = (int64_t)get64(r + 48 + born_len);
        const uint8_t *tail = store_host + store_len; /* RECONSUMETIMES PREPARED BODY length */
        body_len = (int32_t)get32(tail + 12);
        p = pos + header;
        if (body_len < 0 || p + body_len + 3 > rec_end)
            goto fallback;
        Py_ssize_t topic_at = p + body_len, topic_len = buf[topic_at];
        p = topic_at + 3 + topic_len;
        if (p > rec_end)
            goto fallback;
        if (topic == NULL || topic_len != last_topic_len ||
            memcmp(last_topic_raw, buf + topic_at + 1, topic_len) != 0) {
            Py_XDECREF(topic);
            topic = PyUnicode_DecodeUTF8((const char *)buf + topic_at + 1, topic_len, NULL);
            if (topic == NULL)
                goto fallback;
            last_topic_raw = buf + topic_at + 1;
            last_topic_len = topic_len;
        }
        props = PyDict_New();
        if (props == NULL)
            goto fail;
        /* name \x01 value \x02 ...; a pair without \x01 is a name with an empty value */
        while (p < rec_end) {
            const uint8_t *pair = buf + p, *stop = memchr(pair, 2, rec_end - p), *sep;
            Py_ssize_t pair_len = stop ? stop - pair : rec_end - p, name_len;
            PyObject *name, *value, **special = NULL;
            p += pair_len + 1;
            if (pair_len == 0)
                continue;
            sep = memchr(pair, 1, pair_len);
            name_len = sep ? sep - pair : pair_len;
            if (name_len == 4 && memcmp(pair, "TAGS", 4) == 0)
                special = &tags;
            else if (name_len == 4 && memcmp(pair, "KEYS", 4) == 0)
                special = &keys;
            else if (name_len == 8 && memcmp(pair, "UNIQ_KEY", 8) == 0)
                special = &uniq;
            value = sep ? PyUnicode_DecodeUTF8((const char *)sep + 1, pair_len - name_len - 1,
                                               NULL)
                        : PyUnicode_FromStringAndSize("", 0);
            if (value == NULL)
                goto record_done;
            if (special != NULL) {
                Py_XSETREF(*special, value);
                continue;
            }
            name = PyUnicode_DecodeUTF8((const char *)pair, name_len, NULL);
            if (name == NULL || PyDict_SetItem(props, name, value) < 0) {
                Py_XDECREF(name);
                Py_DECREF(value);
                goto record_done;
            }
            Py_DECREF(name);
            Py_DECREF(value);
        }
        a[0] = topic;
        Py_INCREF(topic);
        a[1] = PyBytes_FromStringAndSize((const char *)buf + pos + header, body_len);
        a[2] = tags ? tags : PyUnicode_FromStringAndSize("", 0);
        tags = NULL;
        a[3] = keys ? PyUnicode_Split(keys, NULL, -1) : PyList_New(0);
        a[4] = props;
        props = NULL;
        a[5] = uniq ? uniq : PyUnicode_FromStringAndSize("", 0);
        uniq = NULL;
        a[6] = hex_id(store_host, store_len, (int64_t)get64(r + 28));
        a[7] = broker;
        Py_INCREF(broker);
        a[8] = PyLong_FromLong((int32_t)get32(r + 12));
        a[9] = PyLong_FromLongLong((int64_t)get64(r + 20));
        a[10] = PyLong_FromLongLong((int64_t)get64(r + 28));
        a[11] = PyLong_FromLongLong((int64_t)get64(r + 40));
        a[12] = PyLong_FromLongLong(store_ts);
        a[13] = host_text(hosts, host_of, born_host, born_len);
        a[14] = host_text(hosts, host_of, store_host, store_len);
        a[15] = PyLong_FromLong((int32_t)get32(tail));
        a[16] = PyLong_FromLong((int32_t)get32(r + 16));
        a[17] = PyLong_FromUnsignedLong(sys_flag);
        ok = 1;
        for (int j = 0; j < 18; j++)
            if (a[j] == NULL)
                ok = 0;
        if (ok) {
            msg = PyObject_Vectorcall(cls, a, 18, NULL);
            ok = msg != NULL && PyList_Append(out, msg) == 0;
            Py_XDECREF(msg);
        }
    record_done:
        for (int j = 0; j < 18; j++)
            Py_XDECREF(a[j]);
        Py_XDECREF(tags);
        Py_XDECREF(keys);
        Py_XDECREF(uniq);
        Py_XDECREF(props);
        if (!ok)
            goto fallback;
        pos = rec_end;
    }
    Py_XDECREF(topic);
    PyBuffer_Release(&view);
    return out;
fallback:
    PyErr_Clear();
    Py_XDECREF(topic);
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(topic);
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

/* -- decode_batch_messages: broker.convert.messages_from_batch(remoting.framing.decode_batch) */
#define BATCH_FIXED 22 /* TOTALSIZE MAGIC BODYCRC FLAG, body length, properties length */
#define BATCH_HEAD 20  /* ... up to and including the body length */

/* The str of `n` UTF-8 bytes, the interned one for the names every message has; NULL with a
 * UnicodeDecodeError when they are not UTF-8. */
static PyObject *batch_name(const uint8_t *p, Py_ssize_t n) {
    PyObject *known = NULL;
    if (n == 4 && memcmp(p, "TAGS", 4) == 0)
        known = s_TAGS;
    else if (n == 4 && memcmp(p, "KEYS", 4) == 0)
        known = s_KEYS;
    else if (n == 8 && memcmp(p, "UNIQ_KEY", 8) == 0)
        known = s_UNIQ_KEY;
    if (known != NULL) {
        Py_INCREF(known);
        return known;
    }
    return PyUnicode_DecodeUTF8((const char *)p, n, NULL);
}

/* broker.convert._batch_properties: the dict of one element's `name\x01value\x02` pairs, in
 * wire order. Returns 1 with *out set; 0 (no error set, *out NULL) when the pairs are not
 * well-formed or hold a refused reserved name (Python raises its error for them); -1 with an
 * error set when Python itself failed. */
static int batch_properties(const uint8_t *p, Py_ssize_t n, PyObject *reserved,
                            PyObject *allowed, PyObject **out) {
    PyObject *props, *name = NULL, *value = NULL;
    const uint8_t *pair, *end, *stop, *sep;
    int r;
    *out = NULL;
    props = PyDict_New();
    if (props == NULL)
        return -1;
    if (n == 0) {
        *out = props;
        return 1;
    }
    if (p[n - 1] != 2)
        goto bad;
    end = p + n - 1; /* text[:-1], split on \x02; every pair is name \x01 value */
    for (pair = p;; pair = stop + 1) {
        stop = memchr(pair, 2, end - pair);
        if (stop == NULL)
            stop = end;
        sep = memchr(pair, 1, stop - pair);
        if (sep == NULL || sep == pair || memchr(sep + 1, 1, stop - sep - 1) != NULL)
            goto bad;
        name = batch_name(pair, sep - pair);
        if (name == NULL)
            goto decode_failed;
        r = PySet_Contains(reserved, name); /* r: 0 taken, 1 refused, -1 failed */
        if (r > 0) {
            r = PySet_Contains(allowed, name);
            r = r < 0 ? -1 : !r;
        }
        if (r != 0) {
            Py_CLEAR(name);
            if (r < 0)
                goto fail;
            goto bad;
        }
        value = PyUnicode_DecodeUTF8((const char *)sep + 1, stop - sep - 1, NULL);
        if (value == NULL)
            goto decode_failed;
        r = PyDict_SetItem(props, name, value);
        Py_CLEAR(name);
        Py_CLEAR(value);
        if (r < 0)
            goto fail;
        if (stop == end)
            break;
    }
    *out = props;
    return 1;
decode_failed:
    Py_CLEAR(name);
    if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
        goto fail;
    PyErr_Clear();
bad:
    Py_DECREF(props);
    return 0;
fail:
    Py_DECREF(props);
    return -1;
}

/* The list of store Messages of a MessageBatch, as messages_from_batch(decode_batch(data), ...)
 * returns it; None when `data` is not one (empty, a size that does not add up, properties that
 * are not well-formed: Python raises the right error for it) or not bytes. UNIQ_KEYs are only
 * made, in message order, once every element has been checked, so a None costs no uniq_key()
 * call; an error raised by uniq_key or message_cls is raised, as by Python.
 * Each message is message_cls(topic, body, properties, queue_id, flag, 0, born_timestamp,
 * born_host): store.message.Message's first fields in order, sys_flag 0 (its default), as
 * broker.convert checks before it calls this; positional, as a call with these as keywords
 * takes twice as long. */
static PyObject *decode_batch_messages(PyObject *self, PyObject *args) {
    PyObject *data, *topic, *queue_id, *born_host, *born_ts, *cls, *reserved, *allowed, *uniq_key;
    PyObject *out, *zero = NULL;
    const uint8_t *buf;
    int64_t pos, end, size, body_len, props_len_at;
    Py_ssize_t n = 0, i;
    if (!PyArg_ParseTuple(args, "OOOOOOO!O!O", &data, &topic, &queue_id, &born_host, &born_ts,
                          &cls, &PyFrozenSet_Type, &reserved, &PyFrozenSet_Type, &allowed,
                          &uniq_key))
        return NULL;
    if (!PyBytes_CheckExact(data) || PyBytes_GET_SIZE(data) == 0)
        Py_RETURN_NONE;
    buf = (const uint8_t *)PyBytes_AS_STRING(data);
    end = PyBytes_GET_SIZE(data);
    /* pass 1: the elements' sizes (decode_batch's checks) */
    for (pos = 0; pos < end; pos += size, n++) {
        if (end - pos < BATCH_FIXED)
            Py_RETURN_NONE;
        size = (int32_t)get32(buf + pos);
        body_len = (int32_t)get32(buf + pos + 16);
        props_len_at = pos + BATCH_HEAD + body_len;
        if (body_len < 0 || size < BATCH_FIXED || size > end - pos ||
            props_len_at + 2 > pos + size ||
            props_len_at + 2 + ((buf[props_len_at] << 8) | buf[props_len_at + 1]) != pos + size)
            Py_RETURN_NONE;
    }
    out = PyList_New(n);
    if (out == NULL)
        return NULL;
    /* pass 2: each element's properties dict, held in `out` until its message replaces it */
    for (pos = 0, i = 0; i < n; pos += size, i++) {
        PyObject *props;
        int r;
        size = (int32_t)get32(buf + pos);
        body_len = (int32_t)get32(buf + pos + 16);
        props_len_at = pos + BATCH_HEAD + body_len;
        r = batch_properties(buf + props_len_at + 2, (Py_ssize_t)(pos + size - props_len_at - 2),
                             reserved, allowed, &props);
        if (r <= 0) {
            Py_DECREF(out);
            if (r < 0)
                return NULL;
            Py_RETURN_NONE;
        }
        PyList_SET_ITEM(out, i, props);
    }
    /* pass 3: UNIQ_KEYs where missing or empty, bodies, messages */
    zero = PyLong_FromLong(0);
    if (zero == NULL)
        goto fail;
    for (pos = 0, i = 0; i < n; pos += size, i++) {
        PyObject *props = PyList_GET_ITEM(out, i), *uniq, *msg;
        PyObject *a[8];
        size = (int32_t)get32(buf + pos);
        body_len = (int32_t)get32(buf + pos + 16);
        uniq = PyDict_GetItemWithError(props, s_UNIQ_KEY);
        if (uniq == NULL && PyErr_Occurred())
            goto fail;
        if (uniq == NULL || PyUnicode_GET_LENGTH(uniq) == 0) {
            int r;
            uniq = PyObject_CallNoArgs(uniq_key);
            if (uniq == NULL)
                goto fail;
            r = PyDict_SetItem(props, s_UNIQ_KEY, uniq);
            Py_DECREF(uniq);
            if (r < 0)
                goto fail;
        }
        a[0] = topic;
        a[1] = PyBytes_FromStringAndSize((const char *)buf + pos + BATCH_HEAD,
                                         (Py_ssize_t)body_len);
        a[2] = props;
        a[3] = queue_id;
        a[4] = PyLong_FromLong((int32_t)get32(buf + pos + 12));
        a[5] = zero; /* sys_flag */
        a[6] = born_ts;
        a[7] = born_host;
        msg = a[1] != NULL && a[4] != NULL ? PyObject_Vectorcall(cls, a, 8, NULL) : NULL;
        Py_XDECREF(a[1]);
        Py_XDECREF(a[4]);
        if (msg == NULL)
            goto fail;
        PyList_SET_ITEM(out, i, msg);
        Py_DECREF(props);
    }
    Py_DECREF(zero);
    return out;
fail:
    Py_XDECREF(zero);
    Py_DECREF(out);
    return NULL;
}

/* -- client_elements: mqclient's Message.check + Message.encode -------------------------- */
typedef struct {
    char *p;
    Py_ssize_t len, cap;
} growing;

static int grow(growing *b, Py_ssize_t more) {
    if (b->len + more <= b->cap)
        return 1;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more)
        cap *= 2;
    char *p = PyMem_Realloc(b->p, cap);
    if (p == NULL)
        return 0;
    b->p = p;
    b->cap = cap;
    return 1;
}

static int put(growing *b, const char *p, Py_ssize_t n) {
    if (!grow(b, n))
        return 0;
    memcpy(b->p + b->len, p, n);
    b->len += n;
    return 1;
}

/* The UTF-8 of a str with no \x01 / \x02 separator; NULL (no error set) otherwise. */
static const char *plain_text(PyObject *s, Py_ssize_t *n) {
    const char *p;
    if (!PyUnicode_CheckExact(s))
        return NULL;
    p = PyUnicode_AsUTF8AndSize(s, n);
    if (p == NULL) {
        PyErr_Clear(); /* a lone surrogate: Python's encode raises for it */
        return NULL;
    }
    if (memchr(p, 1, *n) != NULL || memchr(p, 2, *n) != NULL)
        return NULL;
    return p;
}

/* `name\x01value\x02` with plain texts; 0 (no error set) when one is not plain. */
static int put_pair(growing *b, const char *name, Py_ssize_t name_len, PyObject *value) {
    Py_ssize_t n;
    const char *v = plain_text(value, &n);
    return v != NULL && put(b, name, name_len) && put(b, "\x01", 1) && put(b, v, n) &&
           put(b, "\x02", 1);
}

/* KEYS: the keys (a str is split on whitespace, as str.split()) joined by a blank; each must
 * be non-empty, without whitespace or separators. 0 (no error set) when Python must judge. */
static int put_keys(growing *b, PyObject *keys) {
    PyObject *list = keys;
    Py_ssize_t count, i, n;
    int ok = 0;
    if (PyUnicode_CheckExact(keys)) {
        list = PyUnicode_Split(keys, NULL, -1);
        if (list == NULL) {
            PyErr_Clear();
            return 0;
        }
    } else if (!PyList_CheckExact(keys) && !PyTuple_CheckExact(keys)) {
        return 0;
    } else {
        Py_INCREF(list);
    }
    count = PySequence_Fast_GET_SIZE(list);
    if (count == 0 || !put(b, "KEYS\x01", 5))
        goto done;
    for (i = 0; i < count; i++) {
        PyObject *key = PySequence_Fast_GET_ITEM(list, i);
        const char *k = plain_text(key, &n);
        if (k == NULL || n == 0)
            goto done;
        Py_ssize_t len = PyUnicode_GET_LENGTH(key);
        int kind = PyUnicode_KIND(key);
        const void *data = PyUnicode_DATA(key);
        for (Py_ssize_t j = 0; j < len; j++)
            if (Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, j)))
                goto done;
        if ((i > 0 && !put(b, " ", 1)) || !put(b, k, n))
            goto done;
    }
    ok = put(b, "\x02", 1);
done:
    Py_DECREF(list);
    return ok;
}

/* One message as a MessageBatch element, appended to b; 0 (no error set) when Python must do
 * it (anything its check would refuse, or an unusual type). */
static int client_element(growing *b, PyObject *msg, PyObject *message_id, PyObject *sharding,
                          long long max_size, long long max_props, PyObject *reserved) {
    PyObject *o = NULL, *props = NULL, *name, *value;
    long long flag = 0, level = 0;
    Py_ssize_t start = b->len, body_len, props_at, props_len, pos = 0, n;
    const char *text;
    uint8_t *head;
    int ok = 0, truth;
    o = PyObject_GetAttr(msg, s_topic);
    truth = o == NULL ? -1 : PyObject_IsTrue(o);
    Py_CLEAR(o);
    if (truth <= 0)
        goto done;
    o = PyObject_GetAttr(msg, s_body);
    if (o == NULL || !PyBytes_CheckExact(o))
        goto done;
    body_len = PyBytes_GET_SIZE(o);
    if (body_len == 0 || body_len > max_size || !grow(b, BATCH_FIXED + body_len))
        goto done;
    memcpy(b->p + start + BATCH_HEAD, PyBytes_AS_STRING(o), body_len);
    b->len = props_at = start + BATCH_FIXED + body_len;
    Py_CLEAR(o);
    if (!attr_int(msg, s_flag, INT32_MIN, INT32_MAX_, &flag) ||
        !attr_int(msg, s_delay_level, 0, INT32_MAX_, &level))
        goto done;
    if (!put_pair(b, "UNIQ_KEY", 8, message_id))
        goto done;
    o = PyObject_GetAttr(msg, s_tags);
    truth = o == NULL ? -1 : PyObject_IsTrue(o);
    if (truth < 0 || (truth && !put_pair(b, "TAGS", 4, o)))
        goto done;
    Py_CLEAR(o);
    o = PyObject_GetAttr(msg, s_keys);
    truth = o == NULL ? -1 : PyObject_IsTrue(o);
    if (truth < 0 || (truth && !put_keys(b, o)))
        goto done;
    Py_CLEAR(o);
    if (PyUnicode_GET_LENGTH(sharding) > 0 && !put_pair(b, "SHARDING_KEY", 12, sharding))
        goto done;
    if (level > 0) {
        char digits[24];
        int d = snprintf(digits, sizeof digits, "DELAY\x01%lld\x02", level);
        if (!put(b, digits, d))
            goto done;
    }
    props = PyObject_GetAttr(msg, s_properties);
    if (props == NULL || !PyDict_CheckExact(props))
        goto done;
    while (PyDict_Next(props, &pos, &name, &value)) {
        text = plain_text(name, &n);
        if (text == NULL || n == 0 || PySet_Contains(reserved, name) != 0 ||
            !put_pair(b, text, n, value))
            goto done;
    }
    props_len = b->len - props_at;
    if (props_len > max_props)
        goto done;
    head = (uint8_t *)b->p + start;
    put32(head, (uint32_t)(BATCH_FIXED + body_len + props_len));
    put32(head + 4, 0); /* MAGICCODE */
    put32(head + 8, 0); /* BODYCRC */
    put32(head + 12, (uint32_t)(int32_t)flag);
    put32(head + 16, (uint32_t)body_len);
    b->p[props_at - 2] = (char)(props_len >> 8);
    b->p[props_at - 1] = (char)props_len;
    ok = 1;
done:
    Py_XDECREF(o);
    Py_XDECREF(props);
    PyErr_Clear();
    if (!ok)
        b->len = start;
    return ok;
}

/* The MessageBatch elements of msgs (with their ids) joined, as mqclient.message's
 * Message.check then Message.encode make them; None when one needs the Python path. */
static PyObject *client_elements(PyObject *self, PyObject *args) {
    PyObject *msgs, *ids, *sharding, *reserved, *out = NULL;
    long long max_size, max_props;
    growing b = {NULL, 0, 0};
    Py_ssize_t n, i;
    if (!PyArg_ParseTuple(args, "O!O!ULLO!", &PyList_Type, &msgs, &PyList_Type, &ids, &sharding,
                          &max_size, &max_props, &PyFrozenSet_Type, &reserved))
        return NULL;
    n = PyList_GET_SIZE(msgs);
    if (n == 0 || PyList_GET_SIZE(ids) != n)
        Py_RETURN_NONE;
    for (i = 0; i < n; i++)
        if (!client_element(&b, PyList_GET_ITEM(msgs, i), PyList_GET_ITEM(ids, i), sharding,
                            max_size, max_props, reserved))
            break;
    if (i == n)
        out = PyBytes_FromStringAndSize(b.p, b.len);
    else
        out = Py_NewRef(Py_None);
    PyMem_Free(b.p);
    return out;
}

/* -- record properties (SQL92 filter) ------------------------------------------------------ */
static int32_t be32(const uint8_t *p) {
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
}

/* The values of `names` (a tuple of bytes) in the PROPERTIES field of one whole record, as
 * codec.record_property_values; None when the record is not one Python would read the same. */
static PyObject *property_values(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *names, *out = NULL;
    if (!PyArg_ParseTuple(args, "y*O!", &view, &PyTuple_Type, &names))
        return NULL;
    const uint8_t *buf = view.buf;
    Py_ssize_t len = view.len, n = PyTuple_GET_SIZE(names);
    if (len < HEADER_V4)
        goto python;
    int32_t sys_flag = be32(buf + 36);
    Py_ssize_t p = HEADER_V4 + ((sys_flag & BORN_HOST_V6) ? 12 : 0) +
                   ((sys_flag & STORE_HOST_V6) ? 12 : 0);
    if (p > len)
        goto python;
    int32_t body_len = be32(buf + p - 4);
    if (body_len < 0 || p + (Py_ssize_t)body_len + 3 > len)
        goto python;
    p += body_len;
    p += 1 + buf[p];
    if (p + 2 > len)
        goto python;
    Py_ssize_t props_len = (Py_ssize_t)buf[p] << 8 | buf[p + 1];
    const uint8_t *props = buf + p + 2;
    if (p + 2 + props_len > len)
        goto python;
    out = PyTuple_New(n);
    if (out == NULL)
        goto done;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *name = PyTuple_GET_ITEM(names, k), *value = NULL;
        if (!PyBytes_Check(name)) {
            Py_CLEAR(out);
            goto python;
        }
        const uint8_t *key = (const uint8_t *)PyBytes_AS_STRING(name);
        Py_ssize_t key_len = PyBytes_GET_SIZE(name), i = 0;
        while (i < props_len) { /* one pair per turn: name \x01 value \x02 */
            const uint8_t *pair = props + i;
            const uint8_t *sep = memchr(pair, 2, props_len - i);
            Py_ssize_t pair_len = sep ? sep - pair : props_len - i;
            if (pair_len > key_len && pair[key_len] == 1 && memcmp(pair, key, key_len) == 0) {
                value = PyBytes_FromStringAndSize((const char *)pair + key_len + 1,
                                                  pair_len - key_len - 1);
                if (value == NULL) {
                    Py_CLEAR(out);
                    goto done;
                }
                break;
            }
            i += pair_len + 1;
        }
        PyTuple_SET_ITEM(out, k, value ? value : Py_NewRef(Py_None));
    }
    goto done;
python:
    out = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&view);
    return out;
}

/* -- crc32c (for tests) ------------------------------------------------------------------- */
static PyObject *py_crc32c(PyObject *self, PyObject *args) {
    Py_buffer data;
    unsigned long crc = 0;
    uint32_t out;
    if (!PyArg_ParseTuple(args, "y*|k", &data, &crc))
        return NULL;
    out = crc32c_extend((uint32_t)crc, data.buf, data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(out);
}

static PyMethodDef methods[] = {
    {"encode", encode, METH_VARARGS,
     "encode(msgs, store_flag, hosts, prefixes, max_body, max_total, max_props): "
     "CommitLog.encode's list, or None when Python must encode them."},
    {"pack", pack, METH_VARARGS,
     "pack(encoded, start, table, phys, room, now, store_host, phys_out, qoff_out): "
     "as commitlog._pack_records, or None."},
    {"gather", gather, METH_VARARGS,
     "gather(encoded, phys_offsets, queue_offsets, ts, queues, index_items, index_on, "
     "add_entry): as reput._gather_records."},
    {"index_keys", index_keys, METH_VARARGS,
     "index_keys(mm, base, slot_num, limit, items, i, k, state): as index.index_keys."},
    {"scan", scan, METH_VARARGS,
     "scan(mm, pos, size, base, topics, max_props, max_records, run): as "
     "scanning.scan_plain_records."},
    {"decode_pulled", decode_pulled, METH_VARARGS,
     "decode_pulled(raw, broker_name, message_class, host_texts, host_of): as "
     "mqclient.codec.decode_records, or None."},
    {"decode_batch_messages", decode_batch_messages, METH_VARARGS,
     "decode_batch_messages(data, topic, queue_id, born_host, born_timestamp, message_cls, "
     "reserved, client_allowed, uniq_key): as broker.convert.messages_from_batch("
     "remoting.framing.decode_batch(data), ...), or None."},
    {"client_elements", client_elements, METH_VARARGS,
     "client_elements(msgs, ids, sharding_key, max_size, max_props, reserved): the "
     "MessageBatch elements of mqclient Messages joined, as Message.check and "
     "Message.encode make them, or None."},
    {"property_values", property_values, METH_VARARGS,
     "property_values(record, names): as codec.record_property_values, or None."},
    {"crc32c", py_crc32c, METH_VARARGS, "crc32c(data, crc=0): CRC32C, as crc32c.crc32c."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "common._native", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *m;
    crc_init();
#define INTERN(var, text)                                                                     \
    if ((var = PyUnicode_InternFromString(text)) == NULL)                                     \
        return NULL;
    INTERN(s_topic, "topic");
    INTERN(s_body, "body");
    INTERN(s_properties, "properties");
    INTERN(s_queue_id, "queue_id");
    INTERN(s_born_host, "born_host");
    INTERN(s_sys_flag, "sys_flag");
    INTERN(s_flag, "flag");
    INTERN(s_born_timestamp, "born_timestamp");
    INTERN(s_reconsume_times, "reconsume_times");
    INTERN(s_prepared_transaction_offset, "prepared_transaction_offset");
    INTERN(s_TAGS, "TAGS");
    INTERN(s_KEYS, "KEYS");
    INTERN(s_UNIQ_KEY, "UNIQ_KEY");
    INTERN(s_DELAY, "DELAY");
    INTERN(s_empty, "");
    INTERN(s_tags, "tags");
    INTERN(s_keys, "keys");
    INTERN(s_delay_level, "delay_level");
    m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "MESSAGE_MAGIC_CODE", MESSAGE_MAGIC_CODE) < 0 ||
        PyModule_AddIntConstant(m, "NO_QUEUE_OFFSET_BIT", NO_QUEUE_OFFSET_BIT) < 0 ||
        PyModule_AddIntConstant(m, "HARDWARE_CRC", crc_hw_ok) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
