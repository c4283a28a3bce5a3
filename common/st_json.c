/*
 * st_json: strict validation, compaction, escaping and a bounded DOM.
 *
 * DESIGN.  One scanner, written once, decides what is JSON: scan() walks the
 * text a single time with an explicit container stack (ST_JSON_MAX_DEPTH
 * bytes, no recursion, no allocation) and, when given an output pointer,
 * copies every byte that is not whitespace outside a string.  The output
 * position never passes the input position, so in-place compaction is safe.
 * The grammar is exactly what PostgreSQL 15's json input accepts (checked
 * against a real server, see st_json_test.c): RFC 8259 tokens, only
 * space/tab/LF/CR as whitespace, strict UTF-8 inside strings (outside them
 * every legal byte is ASCII), surrogate escapes paired, \u0000 allowed (the
 * json type stores text; only de-escaping would refuse it).
 *
 * The DOM re-uses scan() to validate first; it then builds nodes with a
 * simple recursive descent over text known to be valid and no deeper than
 * ST_JSON_MAX_DEPTH, so the descent cannot fail except on the node bound or
 * on \u0000 (a decoded C string cannot hold it).  Children of a container are
 * a contiguous slice of one index array, so st_json_at is O(1).
 *
 * SIZE.  About 800 lines: the scanner, the escaper and the DOM share the
 * scanner's tables.
 */
#include "st_json.h"
#include "st_util.h"

#include <stdlib.h>
#include <string.h>

/* ---- UTF-8 ------------------------------------------------------------ */

/*
 * Length of the well-formed UTF-8 sequence at s[0..n) whose first byte is
 * >= 0x80, or 0 if it is not well formed (Unicode table 3-7: this refuses
 * overlongs, encoded surrogates and anything above U+10FFFF).
 */
static size_t
utf8_seq(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	unsigned char lo = 0x80, hi = 0xBF;
	size_t need;

	if (c >= 0xC2 && c <= 0xDF)
		need = 2;
	else if (c >= 0xE0 && c <= 0xEF) {
		need = 3;
		if (c == 0xE0)
			lo = 0xA0;
		else if (c == 0xED)
			hi = 0x9F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		need = 4;
		if (c == 0xF0)
			lo = 0x90;
		else if (c == 0xF4)
			hi = 0x8F;
	} else
		return 0;
	if (n < need)
		return 0;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < need; i++)
		if (s[i] < 0x80 || s[i] > 0xBF)
			return 0;
	return need;
}

bool
st_utf8_valid(const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;

	while (i < len) {
		if (p[i] == 0)
			return false;
		if (p[i] < 0x80) {
			i++;
			continue;
		}
		size_t k = utf8_seq(p + i, len - i);
		if (k == 0)
			return false;
		i += k;
	}
	return true;
}

/* ---- the scanner ------------------------------------------------------ */

/* Reads the 4 hex digits after "\u" at p[i..]; -1 if malformed. */
static long
hex4(const unsigned char *p, size_t i, size_t len)
{
	long v = 0;

	if (len - i < 4)
		return -1;
	for (int k = 0; k < 4; k++) {
		int h = st_hex_digit(p[i + (size_t)k]);
		if (h < 0)
			return -1;
		v = v * 16 + h;
	}
	return v;
}

static bool
is_ws(unsigned char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/*
 * Scans the string whose opening quote is at p[*ip]; on success *ip is just
 * past the closing quote.  Returns NULL or a static reason.
 */
static const char *
scan_string(const unsigned char *p, size_t len, size_t *ip)
{
	size_t i = *ip + 1;

	for (;;) {
		if (i >= len)
			return "unterminated string";
		unsigned char c = p[i];
		if (c == '"') {
			*ip = i + 1;
			return NULL;
		}
		if (c < 0x20)
			return "control character in string";
		if (c >= 0x80) {
			size_t k = utf8_seq(p + i, len - i);
			if (k == 0)
				return "invalid UTF-8";
			i += k;
			continue;
		}
		if (c != '\\') {
			i++;
			continue;
		}
		if (++i >= len)
			return "unterminated string";
		switch (p[i]) {
		case '"':
		case '\\':
		case '/':
		case 'b':
		case 'f':
		case 'n':
		case 'r':
		case 't': i++; continue;
		case 'u': break;
		default: return "bad escape";
		}
		long u = hex4(p, i + 1, len);
		if (u < 0)
			return "bad \\u escape";
		i += 5;
		if (u >= 0xDC00 && u <= 0xDFFF)
			return "lone low surrogate";
		if (u >= 0xD800 && u <= 0xDBFF) {
			if (len - i < 2 || p[i] != '\\' || p[i + 1] != 'u')
				return "unpaired high surrogate";
			long lo = hex4(p, i + 2, len);
			if (lo < 0)
				return "bad \\u escape";
			if (lo < 0xDC00 || lo > 0xDFFF)
				return "unpaired high surrogate";
			i += 6;
		}
	}
}

static bool
is_digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

/* RFC 8259 number at p[*ip]: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static const char *
scan_number(const unsigned char *p, size_t len, size_t *ip)
{
	size_t i = *ip;

	if (i < len && p[i] == '-')
		i++;
	if (i >= len || !is_digit(p[i]))
		return "bad number";
	if (p[i] == '0') {
		i++;
		if (i < len && is_digit(p[i]))
			return "leading zero";
	} else
		while (i < len && is_digit(p[i]))
			i++;
	if (i < len && p[i] == '.') {
		i++;
		if (i >= len || !is_digit(p[i]))
			return "bad number";
		while (i < len && is_digit(p[i]))
			i++;
	}
	if (i < len && (p[i] == 'e' || p[i] == 'E')) {
		i++;
		if (i < len && (p[i] == '+' || p[i] == '-'))
			i++;
		if (i >= len || !is_digit(p[i]))
			return "bad number";
		while (i < len && is_digit(p[i]))
			i++;
	}
	*ip = i;
	return NULL;
}

/* The literal word at p[*ip] (true/false/null). */
static const char *
scan_word(const unsigned char *p, size_t len, size_t *ip, const char *w)
{
	size_t n = strlen(w);

	if (len - *ip < n || memcmp(p + *ip, w, n) != 0)
		return "invalid token";
	*ip += n;
	return NULL;
}

/*
 * Validates p[0..len) as one JSON text.  When out is not NULL, writes the
 * compact form there (out may equal p) and its length to *out_len.
 */
static const char *
scan(const unsigned char *p, size_t len, unsigned char *out, size_t *out_len)
{
	/* stack[d] is '[' or '{' for each open container */
	unsigned char stack[ST_JSON_MAX_DEPTH];
	size_t depth = 0, i = 0, o = 0;
	const char *e;
	enum { VALUE, KEY_OR_CLOSE, KEY, COLON, AFTER, VALUE_OR_CLOSE } st = VALUE;

	for (;;) {
		while (i < len && is_ws(p[i]))
			i++;
		if (st == AFTER && depth == 0) {
			if (i != len)
				return "garbage after value";
			if (out_len)
				*out_len = o;
			return NULL;
		}
		if (i >= len)
			return "unexpected end of input";

		size_t start = i;
		unsigned char c = p[i];

		switch (st) {
		case COLON:
			if (c != ':')
				return "expected ':'";
			i++;
			st = VALUE;
			break;
		case AFTER:
			if (c == ',') {
				i++;
				st = stack[depth - 1] == '{' ? KEY : VALUE;
			} else if ((c == ']' && stack[depth - 1] == '[') || (c == '}' && stack[depth - 1] == '{')) {
				i++;
				depth--;
			} else
				return "expected ',' or end of container";
			break;
		case KEY_OR_CLOSE:
			if (c == '}') {
				i++;
				depth--;
				st = AFTER;
				break;
			}
			/* fall through */
		case KEY:
			if (c != '"')
				return "expected object key";
			if ((e = scan_string(p, len, &i)) != NULL)
				return e;
			st = COLON;
			break;
		case VALUE_OR_CLOSE:
			if (c == ']') {
				i++;
				depth--;
				st = AFTER;
				break;
			}
			/* fall through */
		case VALUE:
			e = NULL;
			switch (c) {
			case '{':
			case '[':
				if (depth == ST_JSON_MAX_DEPTH)
					return "nesting too deep";
				stack[depth++] = c;
				i++;
				st = c == '{' ? KEY_OR_CLOSE : VALUE_OR_CLOSE;
				break;
			case '"':
				e = scan_string(p, len, &i);
				st = AFTER;
				break;
			case 't':
				e = scan_word(p, len, &i, "true");
				st = AFTER;
				break;
			case 'f':
				e = scan_word(p, len, &i, "false");
				st = AFTER;
				break;
			case 'n':
				e = scan_word(p, len, &i, "null");
				st = AFTER;
				break;
			default:
				e = scan_number(p, len, &i);
				st = AFTER;
				break;
			}
			if (e != NULL)
				return e;
			/* "truex", "1x", "nullnull": a word must end at a delimiter */
			if (st == AFTER && c != '"' && i < len &&
			    ((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= 'A' && p[i] <= 'Z') || is_digit(p[i]) ||
			     p[i] == '_' || p[i] >= 0x80))
				return "invalid token";
			break;
		}
		if (out) {
			if (out + o != p + start)
				memmove(out + o, p + start, i - start);
			o += i - start;
		}
	}
}

st_err
st_json_compact(const char *in, size_t len, char *out, size_t *out_len, const char **err)
{
	const char *e = scan((const unsigned char *)in, len, (unsigned char *)out, out_len);

	if (e == NULL)
		return ST_OK;
	if (err)
		*err = e;
	return ST_EINVAL;
}

/* ---- escaping --------------------------------------------------------- */

/* The escape of byte c < 0x20, '"' or '\\' into esc; returns its length (2 or 6). */
static size_t
esc_byte(unsigned char c, char esc[6])
{
	static const char hex[] = "0123456789abcdef";

	esc[0] = '\\';
	switch (c) {
	case '"': esc[1] = '"'; return 2;
	case '\\': esc[1] = '\\'; return 2;
	case '\n': esc[1] = 'n'; return 2;
	case '\r': esc[1] = 'r'; return 2;
	case '\t': esc[1] = 't'; return 2;
	case '\b': esc[1] = 'b'; return 2;
	case '\f': esc[1] = 'f'; return 2;
	default:
		memcpy(esc + 1, "u00", 3);
		esc[4] = hex[c >> 4];
		esc[5] = hex[c & 15];
		return 6;
	}
}

/*
 * One loop for both the length and the text, so they cannot disagree:
 * with b NULL only counts.  Runs of bytes that need nothing are appended
 * in one piece; a byte that starts no well-formed UTF-8 sequence becomes
 * \ufffd (6 bytes).
 */
static size_t
escape(st_buf *b, const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t run = 0, n = 2;

	if (b)
		st_buf_putc(b, '"');
	for (size_t i = 0; i < len;) {
		unsigned char c = p[i];
		char esc[6];
		size_t k, e;

		if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
			i++, n++;
			continue;
		}
		if (c >= 0x80 && (k = utf8_seq(p + i, len - i)) != 0) {
			i += k, n += k;
			continue;
		}
		if (c >= 0x80) {
			memcpy(esc, "\\ufffd", 6);
			e = 6;
		} else {
			e = esc_byte(c, esc);
		}
		if (b) {
			st_buf_append(b, s + run, i - run);
			st_buf_append(b, esc, e);
		}
		n += e;
		run = ++i;
	}
	if (b) {
		st_buf_append(b, s + run, len - run);
		st_buf_putc(b, '"');
	}
	return n;
}

void
st_json_escape(st_buf *b, const char *s, size_t len)
{
	st_buf_reserve(b, len + 2);
	escape(b, s, len);
}

size_t
st_json_escaped_len(const char *s, size_t len)
{
	return escape(NULL, s, len);
}

void
st_json_problem(st_buf *b, const char *type, const char *title, int status, const char *detail)
{
	st_buf_puts(b, "{\"type\":");
	type = type ? type : "about:blank";
	st_json_escape(b, type, strlen(type));
	/* RFC 9457 3.1: every member is optional; an absent title or detail is left out. */
	if (title) {
		st_buf_puts(b, ",\"title\":");
		st_json_escape(b, title, strlen(title));
	}
	st_buf_printf(b, ",\"status\":%d", status);
	if (detail) {
		st_buf_puts(b, ",\"detail\":");
		st_json_escape(b, detail, strlen(detail));
	}
	st_buf_putc(b, '}');
}

/* ---- the DOM ---------------------------------------------------------- */

typedef struct node {
	enum st_json_type type;
	int parent;
	size_t raw_off, raw_len;
	size_t kid_off, count;   /* containers: slice of st_json.kids */
	size_t str_off, str_len; /* strings: decoded text in st_json.strs */
	size_t key_off;          /* object members: decoded key in strs; SIZE_MAX otherwise */
} node;

struct st_json {
	char *text; /* copy of the input */
	size_t len;
	char *strs; /* decoded strings and keys, each NUL-terminated */
	size_t strs_len;
	node *nodes;
	size_t n_nodes, cap_nodes, max_nodes;
	int *kids;
};

typedef struct builder {
	st_json *j;
	size_t i;
	const char *err;
	const char *opaque; /* member key whose values are not expanded (st_json_parse_opaque), or NULL */
} builder;

/* Steps over the (valid) value at text[b->i] without building anything. */
static void
skip_value(builder *b)
{
	const char *t = b->j->text;
	size_t depth = 0;

	do {
		char c = t[b->i];

		if (c == '"') {
			for (b->i++; t[b->i] != '"'; b->i++)
				if (t[b->i] == '\\')
					b->i++;
			b->i++;
		} else if (c == '{' || c == '[') {
			depth++;
			b->i++;
		} else if (c == '}' || c == ']') {
			depth--;
			b->i++;
		} else if (depth > 0) {
			b->i++; /* ',' ':' whitespace and scalar bytes inside a container */
		} else if (c == 't' || c == 'n') {
			b->i += 4;
		} else if (c == 'f') {
			b->i += 5;
		} else {
			(void)scan_number((const unsigned char *)t, b->j->len, &b->i);
		}
	} while (depth > 0);
}

static void
skip_ws(builder *b)
{
	while (b->i < b->j->len && is_ws((unsigned char)b->j->text[b->i]))
		b->i++;
}

/* Decodes the (valid) string at text[b->i] into strs; *off gets its start. */
static bool
decode_string(builder *b, size_t *off, size_t *dlen)
{
	const unsigned char *p = (const unsigned char *)b->j->text;
	char *o = b->j->strs + b->j->strs_len;
	size_t i = b->i + 1, n = 0;

	*off = b->j->strs_len;
	while (p[i] != '"') {
		if (p[i] != '\\') {
			o[n++] = (char)p[i++];
			continue;
		}
		i++;
		char c = (char)p[i++];
		switch (c) {
		case 'b': o[n++] = '\b'; continue;
		case 'f': o[n++] = '\f'; continue;
		case 'n': o[n++] = '\n'; continue;
		case 'r': o[n++] = '\r'; continue;
		case 't': o[n++] = '\t'; continue;
		case 'u': break;
		default: o[n++] = c; continue;
		}
		unsigned long u = (unsigned long)hex4(p, i, b->j->len);
		i += 4;
		if (u >= 0xD800 && u <= 0xDBFF) {
			unsigned long lo = (unsigned long)hex4(p, i + 2, b->j->len);
			u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
			i += 6;
		}
		if (u == 0) {
			b->err = "\\u0000 in string";
			return false;
		}
		/* the escape took at least 6 bytes; its UTF-8 form at most 4 */
		if (u < 0x80)
			o[n++] = (char)u;
		else if (u < 0x800) {
			o[n++] = (char)(0xC0 | (u >> 6));
			o[n++] = (char)(0x80 | (u & 0x3F));
		} else if (u < 0x10000) {
			o[n++] = (char)(0xE0 | (u >> 12));
			o[n++] = (char)(0x80 | ((u >> 6) & 0x3F));
			o[n++] = (char)(0x80 | (u & 0x3F));
		} else {
			o[n++] = (char)(0xF0 | (u >> 18));
			o[n++] = (char)(0x80 | ((u >> 12) & 0x3F));
			o[n++] = (char)(0x80 | ((u >> 6) & 0x3F));
			o[n++] = (char)(0x80 | (u & 0x3F));
		}
	}
	o[n] = '\0';
	b->j->strs_len += n + 1;
	b->i = i + 1;
	*dlen = n;
	return true;
}

static int
node_add(builder *b, enum st_json_type type, int parent)
{
	st_json *j = b->j;

	if (j->n_nodes >= j->max_nodes) {
		b->err = "too many values";
		return -1;
	}
	if (j->n_nodes == j->cap_nodes) {
		size_t cap = j->cap_nodes ? j->cap_nodes * 2 : 16;
		if (cap > j->max_nodes)
			cap = j->max_nodes;
		j->nodes = st_xrealloc(j->nodes, cap * sizeof(*j->nodes));
		j->cap_nodes = cap;
	}
	node *n = &j->nodes[j->n_nodes];
	memset(n, 0, sizeof(*n));
	n->type = type;
	n->parent = parent;
	n->raw_off = b->i;
	n->key_off = SIZE_MAX;
	if (parent >= 0)
		j->nodes[parent].count++;
	return (int)j->n_nodes++;
}

/* Builds the value at text[b->i] (valid JSON, depth already bounded). */
static int
build_value(builder *b, int parent, size_t key_off)
{
	st_json *j = b->j;
	char c = j->text[b->i];
	enum st_json_type t;
	int me;

	switch (c) {
	case '{': t = ST_JSON_OBJECT; break;
	case '[': t = ST_JSON_ARRAY; break;
	case '"': t = ST_JSON_STRING; break;
	case 't': t = ST_JSON_TRUE; break;
	case 'f': t = ST_JSON_FALSE; break;
	case 'n': t = ST_JSON_NULL; break;
	default: t = ST_JSON_NUMBER; break;
	}
	if ((me = node_add(b, t, parent)) < 0)
		return -1;
	j->nodes[me].key_off = key_off;
	if (b->opaque != NULL && key_off != SIZE_MAX && strcmp(j->strs + key_off, b->opaque) == 0) {
		skip_value(b);
		j->nodes[me].raw_len = b->i - j->nodes[me].raw_off;
		return me;
	}

	switch (t) {
	case ST_JSON_STRING: {
		size_t off, dl;
		if (!decode_string(b, &off, &dl))
			return -1;
		j->nodes[me].str_off = off;
		j->nodes[me].str_len = dl;
		break;
	}
	case ST_JSON_TRUE: b->i += 4; break;
	case ST_JSON_FALSE: b->i += 5; break;
	case ST_JSON_NULL: b->i += 4; break;
	case ST_JSON_NUMBER: (void)scan_number((const unsigned char *)j->text, j->len, &b->i); break;
	case ST_JSON_ARRAY:
	case ST_JSON_OBJECT: {
		char close = t == ST_JSON_ARRAY ? ']' : '}';
		b->i++;
		skip_ws(b);
		while (j->text[b->i] != close) {
			size_t koff = SIZE_MAX, kl;
			if (t == ST_JSON_OBJECT) {
				if (!decode_string(b, &koff, &kl))
					return -1;
				skip_ws(b);
				b->i++; /* ':' */
				skip_ws(b);
			}
			if (build_value(b, me, koff) < 0)
				return -1;
			skip_ws(b);
			if (j->text[b->i] == ',') {
				b->i++;
				skip_ws(b);
			}
		}
		b->i++;
		break;
	}
	}
	j->nodes[me].raw_len = b->i - j->nodes[me].raw_off;
	return me;
}

st_err
st_json_parse(const char *in, size_t len, size_t max_nodes, st_json **out)
{
	return st_json_parse_opaque(in, len, max_nodes, NULL, out);
}

st_err
st_json_parse_opaque(const char *in, size_t len, size_t max_nodes, const char *opaque_key, st_json **out)
{
	st_json *j = NULL;
	builder b;

	*out = NULL;
	if (scan((const unsigned char *)in, len, NULL, NULL) != NULL || max_nodes == 0)
		return ST_EINVAL;
	if (max_nodes > (size_t)INT32_MAX)
		max_nodes = INT32_MAX;
	j = st_xcalloc(1, sizeof(*j));
	j->text = st_xmalloc(len + 1);
	memcpy(j->text, in, len);
	j->text[len] = '\0';
	j->len = len;
	/* every decoded string plus its NUL is shorter than its quoted source */
	j->strs = st_xmalloc(len + 1);
	j->max_nodes = max_nodes;

	b.j = j;
	b.i = 0;
	b.err = NULL;
	b.opaque = opaque_key;
	skip_ws(&b);
	if (build_value(&b, -1, SIZE_MAX) < 0)
		goto fail;

	/* children of each container, contiguous and in document order */
	j->kids = st_xmalloc(j->n_nodes * sizeof(*j->kids));
	size_t off = 0;
	for (size_t k = 0; k < j->n_nodes; k++) {
		j->nodes[k].kid_off = off;
		off += j->nodes[k].count;
		j->nodes[k].count = 0;
	}
	for (size_t k = 1; k < j->n_nodes; k++) {
		node *par = &j->nodes[j->nodes[k].parent];
		j->kids[par->kid_off + par->count++] = (int)k;
	}
	*out = j;
	return ST_OK;
fail:
	st_json_free(j);
	return ST_EINVAL;
}

size_t
st_json_parse_cost(size_t len, size_t max_nodes)
{
	/* the text copy and the string pool; nodes at their peak (a doubling
	 * realloc holds old and new: 1.5 times the final capacity); kids */
	return sizeof(st_json) + 2 * (len + 1) + max_nodes * (sizeof(node) * 3 / 2 + sizeof(int));
}

void
st_json_free(st_json *j)
{
	if (j == NULL)
		return;
	free(j->text);
	free(j->strs);
	free(j->nodes);
	free(j->kids);
	free(j);
}

static const node *
node_get(const st_json *j, int n)
{
	if (j == NULL || n < 0 || (size_t)n >= j->n_nodes)
		return NULL;
	return &j->nodes[n];
}

enum st_json_type
st_json_type(const st_json *j, int n)
{
	const node *x = node_get(j, n);

	return x ? x->type : ST_JSON_NULL;
}

int
st_json_get(const st_json *j, int obj, const char *key)
{
	const node *x = node_get(j, obj);

	if (x == NULL || x->type != ST_JSON_OBJECT)
		return -1;
	for (size_t i = 0; i < x->count; i++) {
		int k = j->kids[x->kid_off + i];
		if (strcmp(j->strs + j->nodes[k].key_off, key) == 0)
			return k;
	}
	return -1;
}

size_t
st_json_count(const st_json *j, int n)
{
	const node *x = node_get(j, n);

	if (x == NULL || (x->type != ST_JSON_ARRAY && x->type != ST_JSON_OBJECT))
		return 0;
	return x->count;
}

int
st_json_at(const st_json *j, int n, size_t i)
{
	const node *x = node_get(j, n);

	if (x == NULL || (x->type != ST_JSON_ARRAY && x->type != ST_JSON_OBJECT) || i >= x->count)
		return -1;
	return j->kids[x->kid_off + i];
}

const char *
st_json_key_at(const st_json *j, int obj, size_t i)
{
	const node *x = node_get(j, obj);

	if (x == NULL || x->type != ST_JSON_OBJECT || i >= x->count)
		return NULL;
	return j->strs + j->nodes[j->kids[x->kid_off + i]].key_off;
}

void
st_json_raw(const st_json *j, int n, const char **p, size_t *len)
{
	const node *x = node_get(j, n);

	if (x == NULL) {
		*p = "";
		*len = 0;
		return;
	}
	*p = j->text + x->raw_off;
	*len = x->raw_len;
}

const char *
st_json_str(const st_json *j, int n, size_t *len)
{
	const node *x = node_get(j, n);

	if (x == NULL || x->type != ST_JSON_STRING)
		return NULL;
	if (len)
		*len = x->str_len;
	return j->strs + x->str_off;
}

st_err
st_json_u64(const st_json *j, int n, uint64_t *out)
{
	const node *x = node_get(j, n);

	if (x == NULL || x->type != ST_JSON_NUMBER)
		return ST_EINVAL;
	for (size_t i = 0; i < x->raw_len; i++)
		if (!is_digit((unsigned char)j->text[x->raw_off + i]))
			return ST_EINVAL;
	return st_parse_u64(j->text + x->raw_off, x->raw_len, out);
}
