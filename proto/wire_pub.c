/*
 * wire_pub: the messages a writer publishes to the edges (proto/README.md
 * "Published messages"): a batch of seq-ordered events, or a tick with the
 * writer's head.  Encoded by the writer, decoded by the edge (and studioctl
 * tail).  The decoder walks the input with mpk.h's bounded cursor and skips
 * map keys it does not know (so version 1 can gain fields); a bad message
 * is ST_EPROTO (a peer of ours broke the protocol).  The daemons' policy on
 * out of memory applies: it aborts (st_x*, st_util.h).
 */
#include "wire_pub.h"

#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "mpk.h"
#include "st_json.h"
#include "st_util.h"

#define PROTO_MAX_WRITER 255u

struct proto_pub {
	enum proto_pub_kind kind;
	proto_str writer;
	uint64_t prev, head;
	proto_pub_event *ev;
	size_t n, cap;
	proto_str *abouts;
};

void
proto_pub_batch_encode(st_buf *out, const char *writer, uint64_t prev, const proto_pub_event *ev, size_t n)
{
	mpk_packer w;
	msgpack_packer *pk;

	pk = mpk_packer_begin(&w, out);
	msgpack_pack_map(pk, 5);
	mpk_pack_cstr(pk, "v");
	msgpack_pack_uint64(pk, PROTO_VERSION);
	mpk_pack_cstr(pk, "k");
	mpk_pack_cstr(pk, "batch");
	mpk_pack_cstr(pk, "w");
	mpk_pack_cstr(pk, writer);
	mpk_pack_cstr(pk, "prev");
	msgpack_pack_uint64(pk, prev);
	mpk_pack_cstr(pk, "ev");
	msgpack_pack_array(pk, n);
	for (size_t i = 0; i < n; i++) {
		msgpack_pack_array(pk, 4);
		msgpack_pack_uint64(pk, ev[i].seq);
		mpk_pack_pstr(pk, ev[i].topic);
		msgpack_pack_array(pk, ev[i].n_about);
		for (uint32_t a = 0; a < ev[i].n_about; a++)
			mpk_pack_pstr(pk, ev[i].about[a]);
		if (ev[i].has_data)
			mpk_pack_pstr(pk, ev[i].data);
		else
			msgpack_pack_nil(pk);
	}
	mpk_packer_end_or_abort(&w, "a published message");
}

void
proto_pub_tick_encode(st_buf *out, const char *writer, uint64_t head)
{
	mpk_packer w;
	msgpack_packer *pk;

	pk = mpk_packer_begin(&w, out);
	msgpack_pack_map(pk, 4);
	mpk_pack_cstr(pk, "v");
	msgpack_pack_uint64(pk, PROTO_VERSION);
	mpk_pack_cstr(pk, "k");
	mpk_pack_cstr(pk, "tick");
	mpk_pack_cstr(pk, "w");
	mpk_pack_cstr(pk, writer);
	mpk_pack_cstr(pk, "head");
	msgpack_pack_uint64(pk, head);
	mpk_packer_end_or_abort(&w, "a published message");
}

/* One [seq, topic, [about...], data-or-nil]. */
static bool
pub_event_decode(mpk_rd *r, proto_pub_event *e, mpk_str_pool *abouts)
{
	uint32_t n, na;
	proto_str s;

	if (mpk_rd_arr(r, &n) != MPK_OK || n != 4)
		return false;
	if (mpk_rd_uint(r, &e->seq) != MPK_OK)
		return false;
	if (mpk_rd_str(r, &e->topic) != MPK_OK || proto_topic_check(e->topic) != NULL)
		return false;
	if (mpk_rd_arr(r, &na) != MPK_OK || na > PROTO_MAX_ABOUT)
		return false;
	for (uint32_t a = 0; a < na; a++) {
		if (mpk_rd_str(r, &s) != MPK_OK || mpk_text_check(s, PROTO_MAX_ABOUT_LEN) != NULL)
			return false;
		if (mpk_pool_push(abouts, s) != ST_OK)
			st_oom("a published message", 0); /* the edge's decoder: a daemon's policy */
	}
	e->n_about = na;
	if (mpk_rd_is_nil(r)) {
		(void)mpk_rd_nil(r);
		e->has_data = false;
		return true;
	}
	if (mpk_rd_str(r, &e->data) != MPK_OK || e->data.len > PROTO_MAX_DATA || e->data.len == 0 ||
	    !st_utf8_valid(e->data.p, e->data.len))
		return false;
	e->has_data = true;
	return true;
}

st_err
proto_pub_decode(const void *buf, size_t len, proto_pub **out)
{
	mpk_rd r = { buf, len };
	proto_pub *m = NULL;
	mpk_str_pool abouts = { NULL, 0, 0 };
	uint32_t n;
	uint64_t v = 0;
	bool have_v = false, have_k = false, have_w = false, have_prev = false, have_head = false, have_ev = false;
	proto_str k, s;

	*out = NULL;
	if (len > PROTO_MAX_PUB || mpk_rd_map(&r, &n) != MPK_OK)
		goto fail;
	m = st_xcalloc(1, sizeof(*m));
	for (uint32_t f = 0; f < n; f++) {
		if (mpk_rd_str(&r, &k) != MPK_OK)
			goto fail;
		if (mpk_str_is(k, "v")) {
			if (have_v || mpk_rd_uint(&r, &v) != MPK_OK)
				goto fail;
			have_v = true;
		} else if (mpk_str_is(k, "k")) {
			if (have_k || mpk_rd_str(&r, &s) != MPK_OK)
				goto fail;
			have_k = true;
			if (mpk_str_is(s, "batch"))
				m->kind = PROTO_PUB_BATCH;
			else if (mpk_str_is(s, "tick"))
				m->kind = PROTO_PUB_TICK;
			else
				goto fail;
		} else if (mpk_str_is(k, "w")) {
			if (have_w || mpk_rd_str(&r, &m->writer) != MPK_OK || m->writer.len > PROTO_MAX_WRITER ||
			    !st_utf8_valid(m->writer.p, m->writer.len))
				goto fail;
			have_w = true;
		} else if (mpk_str_is(k, "prev")) {
			if (have_prev || mpk_rd_uint(&r, &m->prev) != MPK_OK)
				goto fail;
			have_prev = true;
		} else if (mpk_str_is(k, "head")) {
			if (have_head || mpk_rd_uint(&r, &m->head) != MPK_OK)
				goto fail;
			have_head = true;
		} else if (mpk_str_is(k, "ev")) {
			uint32_t ne;
			if (have_ev || mpk_rd_arr(&r, &ne) != MPK_OK)
				goto fail;
			have_ev = true;
			/* grown as events decode, so a hostile count costs only what is really sent */
			for (uint32_t i = 0; i < ne; i++) {
				if (m->n == m->cap) {
					m->cap = m->cap ? m->cap * 2 : 16;
					m->ev = st_xrealloc(m->ev, m->cap * sizeof(*m->ev));
				}
				memset(&m->ev[m->n], 0, sizeof(m->ev[m->n]));
				if (!pub_event_decode(&r, &m->ev[m->n], &abouts))
					goto fail;
				m->n++;
			}
		} else if (mpk_rd_skip(&r, 0) != MPK_OK)
			goto fail;
	}
	if (r.n != 0 || !have_v || v != PROTO_VERSION || !have_k || !have_w)
		goto fail;
	if (m->kind == PROTO_PUB_TICK) {
		/* a tick carries no events: proto_pub_count() is 0 for every tick */
		if (!have_head || have_ev)
			goto fail;
	} else {
		if (!have_prev || !have_ev || m->n == 0)
			goto fail;
		uint64_t last = m->prev;
		for (size_t i = 0; i < m->n; i++) {
			if (m->ev[i].seq <= last)
				goto fail;
			last = m->ev[i].seq;
		}
		m->head = last;
	}
	m->abouts = abouts.v;
	size_t ao = 0;
	for (size_t i = 0; i < m->n; i++) {
		m->ev[i].about = m->ev[i].n_about ? m->abouts + ao : NULL;
		ao += m->ev[i].n_about;
	}
	*out = m;
	return ST_OK;
fail:
	free(abouts.v);
	proto_pub_free(m);
	return ST_EPROTO;
}

enum proto_pub_kind
proto_pub_kind(const proto_pub *m)
{
	return m->kind;
}

proto_str
proto_pub_writer(const proto_pub *m)
{
	return m->writer;
}

uint64_t
proto_pub_prev(const proto_pub *m)
{
	return m->prev;
}

uint64_t
proto_pub_head(const proto_pub *m)
{
	return m->head;
}

size_t
proto_pub_count(const proto_pub *m)
{
	return m->n;
}

const proto_pub_event *
proto_pub_event_at(const proto_pub *m, size_t i)
{
	ST_ASSERT(i < m->n);
	return &m->ev[i];
}

void
proto_pub_free(proto_pub *m)
{
	if (m == NULL)
		return;
	free(m->ev);
	free(m->abouts);
	free(m);
}
