/* The one HTTP/1.1 head parser and message framer; see hframe.h.  One byte
 * at a time through the heads, whole runs at a time through the bodies. */
#include "http/hframe.h"

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
	f->side[0].strict = 1;
}

void mesh_hframe_limits(struct mesh_hframe *f, int dir, int strict, uint32_t max_line, uint16_t max_fields)
{
	struct mesh_hframe_side *s = &f->side[dir & 1];
	s->strict = (uint8_t)(strict || !(dir & 1));
	s->max_line = max_line;
	s->max_fields = max_fields;
}

const char *mesh_hframe_why(const struct mesh_hframe *f, int dir)
{
	const char *w = f->side[dir & 1].why;
	return w ? w : "";
}

int mesh_hframe_answer_begun(const struct mesh_hframe *f)
{
	return f->side[1].state != ST_IDLE;
}

int mesh_hframe_reading(const struct mesh_hframe *f, int dir)
{
	switch (f->side[dir].state) {
	case ST_IDLE:
	case ST_TUNNEL:
	case ST_ERR:
		return 0;
	case ST_LINE:
	case ST_HDR:
		return 1;
	default:
		return 2;
	}
}

static int fail(struct mesh_hframe_side *s, int err, const char *why)
{
	s->state = ST_ERR;
	s->err = err;
	s->why = why;
	return err;
}

/* RFC 9110's tchar: a token's bytes (a method, a field name). */
static const unsigned char tchar[256] = {
	['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['*'] = 1, ['+'] = 1, ['-'] = 1, ['.'] = 1,
	['^'] = 1, ['_'] = 1, ['`'] = 1, ['|'] = 1, ['~'] = 1,
	['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1, ['8'] = 1, ['9'] = 1,
	['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1, ['I'] = 1, ['J'] = 1,
	['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1, ['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1,
	['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1, ['Y'] = 1, ['Z'] = 1,
	['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1, ['i'] = 1, ['j'] = 1,
	['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1,
	['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
};

int mesh_hframe_tchar(unsigned char c)
{
	return tchar[c];
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
	s->nfields = 0;
	s->head_bytes = s->line_bytes = 0;
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

/* keep() without the case folding: a version ("HTTP" is case-sensitive). */
static void keep_raw(char *buf, size_t cap, uint8_t *len, unsigned char c)
{
	if (*len == NAME_OVER)
		return;
	if ((size_t)*len + 1 >= cap) {
		*len = NAME_OVER;
		return;
	}
	buf[(*len)++] = (char)c;
}

/* An HTTP-version kept in val: "HTTP/1." DIGIT. */
static int version_ok(const struct mesh_hframe_side *s)
{
	return s->vlen == 8 && !memcmp(s->val, "HTTP/1.", 7) && s->val[7] >= '0' && s->val[7] <= '9';
}

/* One complete header line (name and value kept in s) of side dir: what it
 * says about the framing.  0 or an error. */
static int header_done(struct mesh_hframe_side *s, int dir, int trailer)
{
	uint8_t vl = s->vlen;
	if (vl != NAME_OVER)
		while (vl && (s->val[vl - 1] == ' ' || s->val[vl - 1] == '\t'))
			vl--;
	if (s->max_fields && ++s->nfields > s->max_fields)
		return fail(s, MESH_E_TOOBIG, trailer ? "too many trailer fields" : "too many header fields");
	if (trailer || s->nlen == NAME_OVER)
		return 0;
	if (s->nlen == 14 && !memcmp(s->name, "content-length", 14)) {
		uint64_t v = 0;
		if (vl == 0 || vl == NAME_OVER)
			return fail(s, MESH_E_PROTO, "bad Content-Length");
		for (uint8_t i = 0; i < vl; i++) {
			if (s->val[i] < '0' || s->val[i] > '9')
				return fail(s, MESH_E_PROTO, "bad Content-Length");
			v = v * 10 + (uint64_t)(s->val[i] - '0');
		}
		/* Digits, but more than any body: a response's is past a limit,
		 * a request's is refused as malformed (400, as before). */
		if (vl > 18)
			return fail(s, dir ? MESH_E_TOOBIG : MESH_E_PROTO, "Content-Length too large");
		/* A request's twice is refused even when both agree (RFC 9112
		 * 6.3 lets a recipient refuse it; a proxy must not guess). */
		if (s->has_cl && (dir == 0 || v != s->cl))
			return fail(s, MESH_E_PROTO, dir == 0 ? "Content-Length repeated" : "Content-Length values disagree");
		s->has_cl = 1;
		s->cl = v;
	} else if (s->nlen == 17 && !memcmp(s->name, "transfer-encoding", 17)) {
		if (s->strict) {
			/* A request's coding is chunked, once, and nothing else
			 * (the one a server must know; another is refused); a
			 * strict reader's response's too. */
			if (s->chunked || vl != 7 || memcmp(s->val, "chunked", 7))
				s->te_other = 1;
			s->chunked = 1;
			return 0;
		}
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
	f->evs |= MESH_HFRAME_EV_END;
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
	if (s->strict && (s->te_other || (s->chunked && s->has_cl)))
		return fail(s, MESH_E_PROTO, dir ? "response framing: Transfer-Encoding other than chunked, or with Content-Length"
						 : "request framing: Transfer-Encoding other than chunked, or with Content-Length");
	f->evs |= MESH_HFRAME_EV_HEAD;
	f->ev_status = s->status;
	f->ev_chunked = s->chunked;
	f->ev_size = s->has_cl ? (int64_t)s->cl : -1;
	if (dir == 0) {
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
	if (!version_ok(s))
		return fail(s, MESH_E_PROTO, dir ? "status line: bad version" : "request line: bad version");
	s->state = ST_HDR;
	s->sub = H_START;
	return 0;
}

/* One byte of a request line: method SP target SP version. */
static int request_line_byte(struct mesh_hframe *f, unsigned char c)
{
	struct mesh_hframe_side *s = &f->side[0];
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
			s->nlen = 0; /* from here: the target's bytes, saturated */
			return 0;
		}
		if (!tchar[c])
			return fail(s, MESH_E_PROTO, "request line: bad method");
		keep(s->name, sizeof s->name, &s->nlen, c);
		return 0;
	case L_B: /* target */
		if (c == ' ') {
			if (!s->nlen)
				return fail(s, MESH_E_PROTO, "request line: no target");
			s->sub = L_C;
			s->vlen = 0;
			return 0;
		}
		if (c < 0x21 || c == 0x7f)
			return fail(s, MESH_E_PROTO, "request line: bad target");
		s->nlen = 1;
		return 0;
	default: /* version */
		if (c == '\r') {
			s->sub = L_CR;
			return 0;
		}
		if (c == '\n')
			return fail(s, MESH_E_PROTO, "request line: bare LF");
		keep_raw(s->val, sizeof s->val, &s->vlen, c);
		return 0;
	}
}

/* One byte of a status line: version SP 3DIGIT [SP reason]. */
static int status_line_byte(struct mesh_hframe *f, unsigned char c)
{
	struct mesh_hframe_side *s = &f->side[1];
	switch (s->sub) {
	case L_A: /* version */
		if (c == ' ') {
			if (!version_ok(s))
				return fail(s, MESH_E_PROTO, "status line: bad version");
			s->sub = L_B;
			s->status = 0;
			s->nlen = 0;
			return 0;
		}
		keep_raw(s->val, sizeof s->val, &s->vlen, c);
		return s->vlen == NAME_OVER ? fail(s, MESH_E_PROTO, "status line: bad version") : 0;
	case L_B: /* three digits */
		if (s->nlen < 3) {
			if (c < '0' || c > '9')
				return fail(s, MESH_E_PROTO, "status line: bad status");
			s->status = (uint16_t)(s->status * 10 + (c - '0'));
			s->nlen++;
			return 0;
		}
		if (s->status < 100 || (s->strict && s->status > 599))
			return fail(s, MESH_E_PROTO, "status line: bad status");
		if (c == ' ') {
			s->sub = L_C;
			return 0;
		}
		if ((c != '\r' && c != '\n') || s->strict)
			return fail(s, MESH_E_PROTO, "status line: bad status");
		/* no reason phrase */
		/* FALLTHROUGH */
	default: /* reason */
		if (c == '\r') {
			s->sub = L_CR;
			return 0;
		}
		if (c == '\n') {
			if (s->strict)
				return fail(s, MESH_E_PROTO, "status line: bare LF");
			return line_done(f, 1);
		}
		if ((c < 0x20 && c != '\t') || (c == 0x7f && s->strict))
			return fail(s, MESH_E_PROTO, "status line: control character");
		s->sub = L_C;
		return 0;
	}
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
	return dir ? status_line_byte(f, c) : request_line_byte(f, c);
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
		if (c == '\n') {
			if (s->strict)
				return fail(s, MESH_E_PROTO, dir ? "bare LF in a response head" : "bare LF in a request head");
			goto end;
		}
		if (c == ' ' || c == '\t')
			return fail(s, MESH_E_PROTO, "folded header line");
		if (!tchar[c])
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
		if (!tchar[c])
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
		if (c == '\n') {
			if (s->strict)
				return fail(s, MESH_E_PROTO, dir ? "bare LF in a response head" : "bare LF in a request head");
			break;
		}
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
	return header_done(s, dir, trailer);
end:
	if (trailer) {
		msg_end(f, dir);
		return 0;
	}
	return head_done(f, dir);
}

/* One byte of a chunk's framing; strict: CRLF only (a request's). */
static int chunk_byte(struct mesh_hframe *f, int dir, unsigned char c)
{
	struct mesh_hframe_side *s = &f->side[dir];
	int strict = s->strict;
	switch (s->state) {
	case ST_CHUNK_SIZE: {
		int v = c >= '0' && c <= '9' ? c - '0' : (c | 32) >= 'a' && (c | 32) <= 'f' ? (c | 32) - 'a' + 10 : -1;
		if (v >= 0) {
			if (++s->sub > 15)
				return fail(s, MESH_E_TOOBIG, "chunk size too long");
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
		if (c != '\n' || strict)
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
		if (c != '\n') {
			if (strict && ((c < 0x20 && c != '\t') || c == 0x7f))
				return fail(s, MESH_E_PROTO, "control character in a chunk extension");
			return 0;
		}
		if (strict)
			return fail(s, MESH_E_PROTO, "bare LF after a chunk size");
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
		if (c != '\n' || (strict && s->state == ST_CHUNK_END))
			return fail(s, MESH_E_PROTO, "chunk data not followed by CRLF");
		s->state = ST_CHUNK_SIZE;
		s->sub = 0;
		s->remaining = 0;
		return 0;
	}
	/* The size line is complete. */
	s->sub = 0;
	s->head_bytes = 0;
	f->evs |= MESH_HFRAME_EV_CHUNK;
	f->ev_size = (int64_t)s->remaining;
	if (s->remaining == 0) {
		s->state = ST_TRAILER;
		s->sub = H_START;
		s->nfields = 0;
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

/* In a head, a run of bytes from p[i] that are read the same as the next
 * (a value the framing ignores, the rest of a name, a request target),
 * while the head's and the line's bounds hold: taken at once (counted,
 * a name's kept).  Where the run ends; i when there is none. */
static size_t head_run(struct mesh_hframe_side *s, int dir, const char *p, size_t i, size_t n)
{
	size_t room = MESH_HFRAME_MAX_HEAD - s->head_bytes, j = i;
	if (s->max_line && s->max_line - s->line_bytes < room)
		room = s->max_line - s->line_bytes;
	if (room > n - i)
		room = n - i;
	if (s->state == ST_HDR && s->sub == H_VALUE && !framing_header(s)) {
		/* The value of a header the framing ignores: nothing of it is
		 * kept; its end and anything to refuse go byte by byte. */
		while (j < i + room && plain_value_byte((unsigned char)p[j]))
			j++;
	} else if (s->state != ST_LINE && s->sub == H_NAME) {
		/* The rest of a name: kept as header_byte keeps it. */
		while (j < i + room && tchar[(unsigned char)p[j]])
			keep(s->name, sizeof s->name, &s->nlen, (unsigned char)p[j++]);
	} else if (s->state == ST_LINE && dir == 0 && s->sub == L_B) {
		while (j < i + room && (unsigned char)p[j] > 0x20 && p[j] != 0x7f)
			j++;
		if (j > i)
			s->nlen = 1;
	}
	s->head_bytes += (uint32_t)(j - i);
	s->line_bytes += (uint32_t)(j - i);
	return j;
}

/* The first byte of a message is next: a request counted in flight. */
static int msg_begin(struct mesh_hframe *f, int dir)
{
	struct mesh_hframe_side *s = &f->side[dir];
	if (dir == 0) {
		if (f->inflight >= MESH_HFRAME_MAX_PIPELINE)
			return fail(s, MESH_E_TOOBIG, "too many pipelined requests");
		f->inflight++;
		f->requests++;
	}
	s->state = ST_LINE;
	s->sub = L_A;
	s->nlen = s->vlen = 0;
	s->nfields = 0;
	s->head_bytes = s->line_bytes = 0;
	return 0;
}

/* One byte of a head (its first line, a header line, a trailer), within
 * the head's and the line's bounds. */
static int head_byte(struct mesh_hframe *f, int dir, unsigned char c)
{
	struct mesh_hframe_side *s = &f->side[dir];
	if (++s->head_bytes > MESH_HFRAME_MAX_HEAD)
		return fail(s, MESH_E_TOOBIG, dir ? "response head too long" : "request head too long");
	if (s->max_line && ++s->line_bytes > s->max_line)
		return fail(s, MESH_E_TOOBIG, s->state == ST_LINE ? (dir ? "status line too long" : "request line too long")
								 : "header line too long");
	if (c == '\n')
		s->line_bytes = 0;
	return s->state == ST_LINE ? line_byte(f, dir, c) : header_byte(f, dir, c);
}

/* Of n bytes of a body (Content-Length) or a chunk's data, those that
 * belong to it: taken (the message or the chunk ends with the last). */
static size_t body_take(struct mesh_hframe *f, int dir, size_t n)
{
	struct mesh_hframe_side *s = &f->side[dir];
	size_t k = n < s->remaining ? n : (size_t)s->remaining;
	s->remaining -= k;
	if (s->remaining == 0) {
		if (s->state == ST_CL)
			msg_end(f, dir);
		else
			s->state = ST_CHUNK_END;
	}
	return k;
}

/* The event(s) of the byte or run that ends at p + i, into ev. */
static long event(struct mesh_hframe *f, struct mesh_hframe_ev *ev, size_t i)
{
	ev->what |= f->evs;
	ev->status = f->ev_status;
	ev->chunked = f->ev_chunked;
	ev->size = f->ev_size;
	return (long)i;
}

/* Feeds side dir p[0..n): all of it (ev NULL), or up to the first event
 * (ev set).  The bytes taken, or the side's error. */
static long run(struct mesh_hframe *f, int dir, const char *p, size_t n, struct mesh_hframe_ev *ev)
{
	struct mesh_hframe_side *s = &f->side[dir & 1];
	dir &= 1;
	size_t i = 0;
	if (ev) {
		memset(ev, 0, sizeof *ev);
		f->evs = 0;
	}
	while (i < n) {
		unsigned char c = (unsigned char)p[i];
		int rc = 0;
		switch (s->state) {
		case ST_ERR:
			return s->err;
		case ST_TUNNEL:
			return (long)n; /* opaque */
		case ST_CLOSE:
			if (ev) { /* the rest is body, to the close */
				ev->what = MESH_HFRAME_EV_DATA;
				ev->p = p + i;
				ev->n = n - i;
			}
			return (long)n;
		case ST_CL:
		case ST_CHUNK_DATA: {
			size_t k = body_take(f, dir, n - i);
			if (ev) {
				ev->what = MESH_HFRAME_EV_DATA;
				ev->p = p + i;
				ev->n = k;
				return event(f, ev, i + k);
			}
			i += k;
			continue;
		}
		case ST_IDLE:
			/* Empty lines between messages are tolerated (RFC 9112 2.2). */
			if (c == '\r' || c == '\n') {
				i++;
				continue;
			}
			if ((rc = msg_begin(f, dir)) < 0)
				return rc;
			continue;
		case ST_LINE:
		case ST_HDR:
		case ST_TRAILER: {
			size_t j = head_run(s, dir, p, i, n);
			if (j > i) {
				i = j;
				continue;
			}
			rc = head_byte(f, dir, c);
			break;
		}
		default:
			if (s->max_line && ++s->line_bytes > s->max_line)
				return fail(s, MESH_E_TOOBIG, "chunk line too long");
			if (c == '\n')
				s->line_bytes = 0;
			rc = chunk_byte(f, dir, c);
			break;
		}
		if (rc < 0)
			return rc;
		i++;
		if (ev && f->evs)
			return event(f, ev, i);
	}
	return s->state == ST_ERR ? s->err : (long)n;
}

int mesh_hframe_feed(struct mesh_hframe *f, int dir, const char *p, size_t n)
{
	long k = run(f, dir, p, n, NULL);
	return k < 0 ? (int)k : 0;
}

long mesh_hframe_step(struct mesh_hframe *f, int dir, const char *p, size_t n, struct mesh_hframe_ev *ev)
{
	return run(f, dir, p, n, ev);
}

int mesh_hframe_eof(struct mesh_hframe *f, int dir)
{
	if ((dir & 1) && f->side[1].state == ST_CLOSE)
		msg_end(f, 1);
	return 0;
}

size_t mesh_hframe_head_end(const char *p, size_t n, size_t *scanned)
{
	size_t i = *scanned, start = 0;
	/* Empty lines before the request line are no head's end. */
	while (start < n && (p[start] == '\r' || p[start] == '\n'))
		start++;
	if (i < start)
		i = start;
	for (; i < n; i++) {
		const char *nl = memchr(p + i, '\n', n - i);
		if (!nl)
			break;
		i = (size_t)(nl - p);
		if (i + 1 < n && p[i + 1] == '\n')
			return i + 2;
		if (i + 2 < n && p[i + 1] == '\r' && p[i + 2] == '\n')
			return i + 3;
		if (i + 2 >= n)
			break; /* the next bytes tell */
	}
	/* The end found next may start at the last LF or the one before. */
	*scanned = n > start + 2 ? n - 2 : start;
	return 0;
}

/* a[0..an) and b[0..bn) are the same but for the case of ASCII letters. */
static int same_ci(const char *a, size_t an, const char *b, size_t bn)
{
	if (an != bn)
		return 0;
	for (size_t i = 0; i < an; i++)
		if (lower((unsigned char)a[i]) != lower((unsigned char)b[i]))
			return 0;
	return 1;
}

static int word_is(const char *a, size_t an, const char *b)
{
	return same_ci(a, an, b, strlen(b));
}

/* The header field whose line starts at *at in a head p[0..n) that parsed
 * (CRLF lines, name ':' OWS value OWS; no CR but at a line's end): its
 * name and value; *at moves to the next line.  0 at the head's blank line. */
int mesh_hframe_field(const char *p, size_t n, size_t *at, const char **name, size_t *nlen, const char **val,
		      size_t *vlen)
{
	const char *l = p + *at, *cr = memchr(l, '\r', n - *at);
	if (!cr || cr == l)
		return 0;
	const char *colon = memchr(l, ':', (size_t)(cr - l)), *v = colon + 1, *e = cr;
	while (v < e && (*v == ' ' || *v == '\t'))
		v++;
	while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
		e--;
	*name = l;
	*nlen = (size_t)(colon - l);
	*val = v;
	*vlen = (size_t)(e - v);
	*at = (size_t)(cr + 2 - p);
	return 1;
}

/* The next element of the comma-separated list val[0..vlen) from *at (0 at
 * first), OWS trimmed, possibly empty: 1, or 0 past the list's end. */
static int list_next(const char *val, size_t vlen, size_t *at, const char **e, size_t *elen)
{
	if (*at > vlen)
		return 0;
	const char *b = val + *at, *c = memchr(b, ',', vlen - *at), *end = c ? c : val + vlen;
	*at = (size_t)(end - val) + 1;
	while (b < end && (*b == ' ' || *b == '\t'))
		b++;
	while (end > b && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	*e = b;
	*elen = (size_t)(end - b);
	return 1;
}

int mesh_hframe_parse_request(const char *p, size_t n, struct mesh_hframe_head *h)
{
	struct mesh_hframe f;
	struct mesh_hframe_side *s = &f.side[0];
	memset(h, 0, sizeof *h);
	if (n > MESH_HFRAME_MAX_HEAD) {
		h->why = "request head too long";
		return MESH_E_TOOBIG;
	}
	/* The framer's reading (the one mesh serve --http relays by). */
	mesh_hframe_init(&f);
	int rc = mesh_hframe_feed(&f, 0, p, n);
	if (rc) {
		h->why = s->why;
		return rc;
	}
	/* ... which must have read one head that ends at n: waiting for the
	 * first byte of its body, or (none) for the next request. */
	if (f.requests != 1 || !(s->state == ST_IDLE || (s->state == ST_CL && s->remaining == s->cl) ||
				 (s->state == ST_CHUNK_SIZE && s->sub == 0))) {
		h->why = "not one whole request head";
		return MESH_E_PROTO;
	}
	h->len = n;
	h->chunked = s->state == ST_CHUNK_SIZE;
	h->content_length = s->state == ST_CL ? s->cl : 0;
	/* What it read is well formed: each part is where the rules put it
	 * (method SP target SP "HTTP/1.x" CRLF, then the fields). */
	size_t at = 0;
	while (p[at] == '\r' || p[at] == '\n')
		at++;
	const char *end = p + n, *line = p + at, *sp1 = memchr(line, ' ', (size_t)(end - line)),
		   *sp2 = memchr(sp1 + 1, ' ', (size_t)(end - sp1 - 1));
	h->line_off = at;
	h->line_len = (size_t)(sp2 + 11 - line);
	h->method_len = (size_t)(sp1 - line);
	h->target_off = (size_t)(sp1 + 1 - p);
	h->target_len = (size_t)(sp2 - sp1 - 1);
	h->minor = sp2[8] - '0';
	h->close = h->minor == 0;
	at = h->line_off + h->line_len;
	const char *name, *val, *el;
	size_t nlen, vlen, elen;
	while (mesh_hframe_field(p, n, &at, &name, &nlen, &val, &vlen)) {
		if (++h->nfields > MESH_HFRAME_MAX_FIELDS) {
			h->why = "too many header fields";
			return MESH_E_TOOBIG;
		}
		if (word_is(name, nlen, "connection")) {
			for (size_t k = 0; list_next(val, vlen, &k, &el, &elen);)
				if (word_is(el, elen, "close"))
					h->close = 1;
		} else if (word_is(name, nlen, "expect")) {
			int e = word_is(val, vlen, "100-continue") ? 1 : 2;
			h->expect = h->expect > e ? h->expect : e;
		}
	}
	return 0;
}

/* The fields a proxy does not send on: hop-by-hop (RFC 9110 7.6.1; and
 * Trailer, which names fields of a chunked body it decodes) and Expect. */
static int hop_by_hop(const char *name, size_t n)
{
#define W(s) {s, sizeof s - 1}
	static const struct {
		const char *w;
		size_t n;
	} hop[] = {W("connection"), W("keep-alive"), W("proxy-connection"), W("te"),
		   W("transfer-encoding"), W("upgrade"), W("trailer"), W("expect")};
#undef W
	for (size_t i = 0; i < sizeof hop / sizeof hop[0]; i++)
		if (same_ci(name, n, hop[i].w, hop[i].n))
			return 1;
	return 0;
}

size_t mesh_hframe_head_forward(char *p, const struct mesh_hframe_head *h)
{
	struct span {
		const char *p;
		size_t n;
	} names[MESH_HFRAME_MAX_FIELDS], opts[32];
	size_t first = h->line_off + h->line_len, at = first, nlen, vlen, elen, nopts = 0, nf = 0;
	const char *name, *val, *el;
	uint64_t drop[(MESH_HFRAME_MAX_FIELDS + 63) / 64] = {0};
	int any = 0;
	/* The names, and the options of the Connection fields (which may
	 * come after the fields they name), while the head is whole. */
	while (mesh_hframe_field(p, h->len, &at, &name, &nlen, &val, &vlen) && nf < MESH_HFRAME_MAX_FIELDS) {
		names[nf++] = (struct span){name, nlen};
		if (!word_is(name, nlen, "connection"))
			continue;
		for (size_t k = 0; list_next(val, vlen, &k, &el, &elen);) {
			/* Never the message's length or its host: a client must
			 * not make a proxy drop those. */
			if (!elen || word_is(el, elen, "content-length") || word_is(el, elen, "host"))
				continue;
			if (nopts == sizeof opts / sizeof opts[0])
				break; /* more than a client has reason to name: the rest go on */
			opts[nopts++] = (struct span){el, elen};
		}
	}
	for (size_t k = 0; k < nf; k++) {
		int d = hop_by_hop(names[k].p, names[k].n);
		for (size_t o = 0; !d && o < nopts; o++)
			d = same_ci(names[k].p, names[k].n, opts[o].p, opts[o].n);
		if (d) {
			drop[k / 64] |= 1ull << (k % 64);
			any = 1;
		}
	}
	if (!any)
		return first;
	/* The kept ones close up behind the request line (never ahead of the
	 * next line to read), then move to the end of the head. */
	size_t w = first, r = first;
	for (size_t k = 0; mesh_hframe_field(p, h->len, &r, &name, &nlen, &val, &vlen); k++) {
		size_t len = (size_t)(p + r - name);
		if (drop[k / 64] & (1ull << (k % 64)))
			continue;
		memmove(p + w, name, len);
		w += len;
	}
	size_t kept = w - first;
	memmove(p + h->len - 2 - kept, p + first, kept);
	return h->len - 2 - kept; /* the blank line is where it was */
}
