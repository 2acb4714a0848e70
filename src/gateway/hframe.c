/* The HTTP/1.1 framer of a relayed connection; see hframe.h.  One byte at
 * a time through the heads, whole runs at a time through the bodies. */
#include "gateway/hframe.h"

#include "base/err.h"

#include <string.h>

enum { ST_IDLE, ST_LINE, ST_HDR, ST_TRAILER, ST_CL, ST_CHUNK_SIZE, ST_CHUNK_EXT, ST_CHUNK_SIZE_LF,
       ST_CHUNK_DATA, ST_CHUNK_END, ST_CHUNK_END_LF, ST_CLOSE, ST_TUNNEL, ST_ERR };
/* First line: request (method, target, version) or status (version, code, reason). */
enum { L_A, L_B, L_C, L_CR };
/* Header lines. */
enum { H_START, H_NAME, H_OWS, H_VALUE, H_VCR, H_END_CR };

#define NAME_OVER 0xff /* a name or value longer than kept: not one we read */

void mesh_hframe_init(struct mesh_hframe *f)
{
	memset(f, 0, sizeof *f);
}

const char *mesh_hframe_why(const struct mesh_hframe *f, int dir)
{
	const char *w = f->side[dir & 1].why;
	return w ? w : "";
}

static int fail(struct mesh_hframe_side *s, int err, const char *why)
{
	s->state = ST_ERR;
	s->err = err;
	s->why = why;
	return err;
}

static int is_tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

static unsigned char lower(unsigned char c)
{
	return c >= 'A' && c <= 'Z' ? (unsigned char)(c + 32) : c;
}

/* Resets the per-message fields of s and makes it wait for the next message. */
static void msg_reset(struct mesh_hframe_side *s)
{
	s->state = ST_IDLE;
	s->sub = 0;
	s->chunked = s->has_cl = s->te_other = 0;
	s->nlen = s->vlen = 0;
	s->status = 0;
	s->head_bytes = 0;
	s->remaining = s->cl = 0;
}

static void keep(char *buf, size_t cap, uint8_t *len, unsigned char c)
{
	if (*len == NAME_OVER)
		return;
	if ((size_t)*len + 1 >= cap) {
		*len = NAME_OVER;
		return;
	}
	buf[(*len)++] = (char)lower(c);
}

/* One complete header line (name and value kept in s): what it says about
 * the framing.  0 or an error. */
static int header_done(struct mesh_hframe_side *s, int trailer)
{
	uint8_t vl = s->vlen;
	if (vl != NAME_OVER)
		while (vl && (s->val[vl - 1] == ' ' || s->val[vl - 1] == '\t'))
			vl--;
	if (trailer || s->nlen == NAME_OVER)
		return 0;
	if (s->nlen == 14 && !memcmp(s->name, "content-length", 14)) {
		uint64_t v = 0;
		if (vl == 0 || vl == NAME_OVER || vl > 18)
			return fail(s, MESH_E_PROTO, "bad Content-Length");
		for (uint8_t i = 0; i < vl; i++) {
			if (s->val[i] < '0' || s->val[i] > '9')
				return fail(s, MESH_E_PROTO, "bad Content-Length");
			v = v * 10 + (uint64_t)(s->val[i] - '0');
		}
		if (s->has_cl && v != s->cl)
			return fail(s, MESH_E_PROTO, "Content-Length values disagree");
		s->has_cl = 1;
		s->cl = v;
	} else if (s->nlen == 17 && !memcmp(s->name, "transfer-encoding", 17)) {
		/* chunked must be the last coding; anything else before it
		 * is the server's business, not the framing's. */
		if (vl != NAME_OVER && vl >= 7 && !memcmp(s->val + vl - 7, "chunked", 7) &&
		    (vl == 7 || s->val[vl - 8] == ',' || s->val[vl - 8] == ' ' || s->val[vl - 8] == '\t')) {
			s->chunked = 1;
			if (vl != 7)
				s->te_other = 1;
		} else {
			s->chunked = 0;
			s->te_other = 1;
		}
	}
	return 0;
}

static void tunnel(struct mesh_hframe *f)
{
	f->tunnel = 1;
	f->side[0].state = f->side[1].state = ST_TUNNEL;
}

/* A message of side dir is complete. */
static void msg_end(struct mesh_hframe *f, int dir)
{
	msg_reset(&f->side[dir]);
	if (dir == 0 || f->inflight == 0)
		return; /* an unsolicited response (a 408 on an idle connection) ends nothing */
	f->inflight--;
	f->responses++;
	f->head_bits >>= 1;
	f->connect_bits >>= 1;
}

/* The head of a message is complete: where its body ends. */
static int head_done(struct mesh_hframe *f, int dir)
{
	struct mesh_hframe_side *s = &f->side[dir];
	if (dir == 0) {
		if (s->te_other || (s->chunked && s->has_cl))
			return fail(s, MESH_E_PROTO, "request framing: Transfer-Encoding other than chunked, or with Content-Length");
		if (s->chunked) {
			s->state = ST_CHUNK_SIZE;
			s->remaining = 0;
			s->sub = 0;
		} else if (s->has_cl && s->cl) {
			s->state = ST_CL;
			s->remaining = s->cl;
		} else {
			msg_end(f, 0);
		}
		return 0;
	}
	unsigned st = s->status;
	int head = f->inflight && (f->head_bits & 1), connect = f->inflight && (f->connect_bits & 1);
	if (st == 101 || (connect && st >= 200 && st < 300)) {
		tunnel(f);
		return 0;
	}
	if (st < 200) { /* interim: the final response follows */
		msg_reset(s);
		return 0;
	}
	if (head || st == 204 || st == 304) {
		msg_end(f, 1);
	} else if (s->chunked) {
		s->state = ST_CHUNK_SIZE;
		s->remaining = 0;
		s->sub = 0;
	} else if (s->te_other) {
		s->state = ST_CLOSE;
	} else if (s->has_cl) {
		if (s->cl) {
			s->state = ST_CL;
			s->remaining = s->cl;
		} else {
			msg_end(f, 1);
		}
	} else {
		s->state = ST_CLOSE;
	}
	return 0;
}

/* The first line is complete (its version kept in val). */
static int line_done(struct mesh_hframe *f, int dir)
{
	struct mesh_hframe_side *s = &f->side[dir];
	if (s->vlen != 8 || memcmp(s->val, "http/1.", 7) || s->val[7] < '0' || s->val[7] > '9')
		return fail(s, MESH_E_PROTO, dir ? "status line: bad version" : "request line: bad version");
	s->state = ST_HDR;
	s->sub = H_START;
	return 0;
}

/* One byte of a first line. */
static int line_byte(struct mesh_hframe *f, int dir, unsigned char c)
{
	struct mesh_hframe_side *s = &f->side[dir];
	if (s->sub == L_CR) {
		if (c != '\n')
			return fail(s, MESH_E_PROTO, "CR not followed by LF");
		return line_done(f, dir);
	}
	if (dir == 0) {
		switch (s->sub) {
		case L_A: /* method */
			if (c == ' ') {
				if (!s->nlen)
					return fail(s, MESH_E_PROTO, "request line: no method");
				unsigned bit = f->inflight - 1;
				if (s->nlen == 4 && !memcmp(s->name, "head", 4))
					f->head_bits |= 1ull << bit;
				if (s->nlen == 7 && !memcmp(s->name, "connect", 7))
					f->connect_bits |= 1ull << bit;
				s->sub = L_B;
				return 0;
			}
			if (!is_tchar(c))
				return fail(s, MESH_E_PROTO, "request line: bad method");
			keep(s->name, sizeof s->name, &s->nlen, c);
			return 0;
		case L_B: /* target */
			if (c == ' ') {
				s->sub = L_C;
				s->vlen = 0;
				return 0;
			}
			if (c < 0x21 || c == 0x7f)
				return fail(s, MESH_E_PROTO, "request line: bad target");
			return 0;
		default: /* version */
			if (c == '\r') {
				s->sub = L_CR;
				return 0;
			}
			if (c == '\n')
				return line_done(f, dir);
			keep(s->val, sizeof s->val, &s->vlen, c);
			return 0;
		}
	}
	switch (s->sub) {
	case L_A: /* version */
		if (c == ' ') {
			if (s->vlen != 8 || memcmp(s->val, "http/1.", 7) || s->val[7] < '0' || s->val[7] > '9')
				return fail(s, MESH_E_PROTO, "status line: bad version");
			s->sub = L_B;
			s->status = 0;
			s->nlen = 0;
			return 0;
		}
		keep(s->val, sizeof s->val, &s->vlen, c);
		return s->vlen == NAME_OVER ? fail(s, MESH_E_PROTO, "status line: bad version") : 0;
	case L_B: /* three digits */
		if (s->nlen < 3) {
			if (c < '0' || c > '9')
				return fail(s, MESH_E_PROTO, "status line: bad status");
			s->status = (uint16_t)(s->status * 10 + (c - '0'));
			s->nlen++;
			return 0;
		}
		if (s->status < 100)
			return fail(s, MESH_E_PROTO, "status line: bad status");
		if (c == ' ') {
			s->sub = L_C;
			return 0;
		}
		if (c != '\r' && c != '\n')
			return fail(s, MESH_E_PROTO, "status line: bad status");
		/* no reason phrase */
		/* FALLTHROUGH */
	default: /* reason */
		if (c == '\r') {
			s->sub = L_CR;
			return 0;
		}
		if (c == '\n')
			return line_done(f, dir);
		if (c < 0x20 && c != '\t')
			return fail(s, MESH_E_PROTO, "status line: control character");
		s->sub = L_C;
		return 0;
	}
}

/* One byte of a header block (a head or a trailer). */
static int header_byte(struct mesh_hframe *f, int dir, unsigned char c)
{
	struct mesh_hframe_side *s = &f->side[dir];
	int trailer = s->state == ST_TRAILER;
	switch (s->sub) {
	case H_START:
		if (c == '\r') {
			s->sub = H_END_CR;
			return 0;
		}
		if (c == '\n')
			goto end;
		if (c == ' ' || c == '\t')
			return fail(s, MESH_E_PROTO, "folded header line");
		if (!is_tchar(c))
			return fail(s, MESH_E_PROTO, "bad header name");
		s->nlen = s->vlen = 0;
		keep(s->name, sizeof s->name, &s->nlen, c);
		s->sub = H_NAME;
		return 0;
	case H_NAME:
		if (c == ':') {
			s->sub = H_OWS;
			return 0;
		}
		if (!is_tchar(c))
			return fail(s, MESH_E_PROTO, "bad header name");
		keep(s->name, sizeof s->name, &s->nlen, c);
		return 0;
	case H_OWS:
		if (c == ' ' || c == '\t')
			return 0;
		s->sub = H_VALUE;
		/* FALLTHROUGH */
	case H_VALUE:
		if (c == '\r') {
			s->sub = H_VCR;
			return 0;
		}
		if (c == '\n')
			break;
		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return fail(s, MESH_E_PROTO, "control character in a header value");
		keep(s->val, sizeof s->val, &s->vlen, c);
		return 0;
	case H_VCR:
		if (c != '\n')
			return fail(s, MESH_E_PROTO, "CR not followed by LF");
		break;
	case H_END_CR:
		if (c != '\n')
			return fail(s, MESH_E_PROTO, "CR not followed by LF");
		goto end;
	}
	s->sub = H_START;
	return header_done(s, trailer);
end:
	if (trailer) {
		msg_end(f, dir);
		return 0;
	}
	return head_done(f, dir);
}

static int chunk_byte(struct mesh_hframe_side *s, unsigned char c)
{
	switch (s->state) {
	case ST_CHUNK_SIZE: {
		int v = c >= '0' && c <= '9' ? c - '0' : (c | 32) >= 'a' && (c | 32) <= 'f' ? (c | 32) - 'a' + 10 : -1;
		if (v >= 0) {
			if (++s->sub > 15)
				return fail(s, MESH_E_PROTO, "chunk size too long");
			s->remaining = s->remaining * 16 + (uint64_t)v;
			return 0;
		}
		if (!s->sub)
			return fail(s, MESH_E_PROTO, "bad chunk size");
		if (c == ';' || c == ' ' || c == '\t') {
			s->state = ST_CHUNK_EXT;
			return 0;
		}
		if (c == '\r') {
			s->state = ST_CHUNK_SIZE_LF;
			return 0;
		}
		if (c != '\n')
			return fail(s, MESH_E_PROTO, "bad chunk size");
		break;
	}
	case ST_CHUNK_EXT:
		if (++s->head_bytes > MESH_HFRAME_MAX_HEAD)
			return fail(s, MESH_E_TOOBIG, "chunk extension too long");
		if (c == '\r') {
			s->state = ST_CHUNK_SIZE_LF;
			return 0;
		}
		if (c != '\n')
			return 0;
		break;
	case ST_CHUNK_SIZE_LF:
		if (c != '\n')
			return fail(s, MESH_E_PROTO, "CR not followed by LF");
		break;
	case ST_CHUNK_END:
		if (c == '\r') {
			s->state = ST_CHUNK_END_LF;
			return 0;
		}
		/* FALLTHROUGH */
	case ST_CHUNK_END_LF:
		if (c != '\n')
			return fail(s, MESH_E_PROTO, "chunk data not followed by CRLF");
		s->state = ST_CHUNK_SIZE;
		s->sub = 0;
		s->remaining = 0;
		return 0;
	}
	/* The size line is complete. */
	s->sub = 0;
	s->head_bytes = 0;
	if (s->remaining == 0) {
		s->state = ST_TRAILER;
		s->sub = H_START;
	} else {
		s->state = ST_CHUNK_DATA;
	}
	return 0;
}

int mesh_hframe_request(struct mesh_hframe *f, int head, int connect)
{
	if (f->inflight >= MESH_HFRAME_MAX_PIPELINE)
		return fail(&f->side[0], MESH_E_TOOBIG, "too many pipelined requests");
	unsigned bit = f->inflight++;
	f->requests++;
	if (head)
		f->head_bits |= 1ull << bit;
	if (connect)
		f->connect_bits |= 1ull << bit;
	return 0;
}

/* Content-Length or Transfer-Encoding: the headers whose value is kept. */
static int framing_header(const struct mesh_hframe_side *s)
{
	return (s->nlen == 14 && !memcmp(s->name, "content-length", 14)) ||
	       (s->nlen == 17 && !memcmp(s->name, "transfer-encoding", 17));
}

/* A byte header_byte takes in a value without a word: not its end (CR,
 * LF), not a control character it refuses. */
static int plain_value_byte(unsigned char c)
{
	return c >= 0x20 ? c != 0x7f : c == '\t';
}

int mesh_hframe_feed(struct mesh_hframe *f, int dir, const char *p, size_t n)
{
	struct mesh_hframe_side *s = &f->side[dir & 1];
	dir &= 1;
	size_t i = 0;
	while (i < n) {
		unsigned char c = (unsigned char)p[i];
		int rc = 0;
		switch (s->state) {
		case ST_ERR:
			return s->err;
		case ST_TUNNEL:
		case ST_CLOSE:
			return 0;
		case ST_CL:
		case ST_CHUNK_DATA: {
			size_t k = n - i;
			if (k > s->remaining)
				k = (size_t)s->remaining;
			s->remaining -= k;
			i += k;
			if (s->remaining == 0) {
				if (s->state == ST_CL)
					msg_end(f, dir);
				else
					s->state = ST_CHUNK_END;
			}
			continue;
		}
		case ST_IDLE:
			/* Empty lines between messages are tolerated (RFC 9112 2.2). */
			if (c == '\r' || c == '\n') {
				i++;
				continue;
			}
			if (dir == 0) {
				if (f->inflight >= MESH_HFRAME_MAX_PIPELINE)
					return fail(s, MESH_E_TOOBIG, "too many pipelined requests");
				f->inflight++;
				f->requests++;
			}
			s->state = ST_LINE;
			s->sub = L_A;
			s->nlen = s->vlen = 0;
			s->head_bytes = 0;
			continue;
		case ST_LINE:
		case ST_HDR:
		case ST_TRAILER:
			if (s->state == ST_HDR && s->sub == H_VALUE && !framing_header(s)) {
				/* The value of a header the framing ignores: its run of
				 * plain bytes at once (nothing of it is kept); its end
				 * and anything to refuse go byte by byte below. */
				size_t j = i;
				while (j < n && plain_value_byte((unsigned char)p[j]))
					j++;
				if (j > i && s->head_bytes + (j - i) < MESH_HFRAME_MAX_HEAD) {
					s->head_bytes += (uint32_t)(j - i);
					i = j;
					continue;
				}
			}
			if (++s->head_bytes > MESH_HFRAME_MAX_HEAD)
				return fail(s, MESH_E_TOOBIG, dir ? "response head too long" : "request head too long");
			rc = s->state == ST_LINE ? line_byte(f, dir, c) : header_byte(f, dir, c);
			break;
		default:
			rc = chunk_byte(s, c);
			break;
		}
		if (rc < 0)
			return rc;
		i++;
	}
	return s->state == ST_ERR ? s->err : 0;
}

int mesh_hframe_eof(struct mesh_hframe *f, int dir)
{
	if ((dir & 1) && f->side[1].state == ST_CLOSE)
		msg_end(f, 1);
	return 0;
}
