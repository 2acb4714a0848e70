#include "gateway/gw_guard.h"

#include "base/buf.h"
#include "base/err.h"
#include "gateway/gw.h"
#include "gateway/gw_answer.h"
#include "http/hframe.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define KEY_MAX 256

static int add_key(struct mesh__gw_guard *gd, const char *k, size_t n)
{
	char **v = realloc(gd->keys, (gd->nkeys + 1) * sizeof *v);
	if (!v)
		return -ENOMEM;
	gd->keys = v;
	if (!(v[gd->nkeys] = strndup(k, n)))
		return -ENOMEM;
	gd->nkeys++;
	return 0;
}

int mesh__gw_guard_open(struct mesh__gw_guard *gd, const struct mesh_gw_config *c, char **err)
{
	memset(gd, 0, sizeof *gd);
	gd->check_host = !c->allow_public;
	if (!c->api_key_file)
		return 0;
	FILE *f = fopen(c->api_key_file, "re");
	if (!f)
		return mesh_errf(err, -errno, "cannot read the API key file '%s': %s", c->api_key_file, strerror(errno));
	struct stat st;
	if (fstat(fileno(f), &st) == 0 && (st.st_mode & 077)) {
		fclose(f);
		return mesh_errf(err, MESH_E_REFUSED,
				 "the API key file '%s' is readable by others (mode %04o): chmod 600 it", c->api_key_file,
				 (unsigned)(st.st_mode & 07777));
	}
	char line[KEY_MAX + 4];
	unsigned lineno = 0;
	int rc = 0;
	while (!rc && fgets(line, sizeof line, f)) {
		lineno++;
		size_t n = strcspn(line, "\r\n");
		if (line[n] == 0 && !feof(f)) {
			rc = mesh_errf(err, MESH_E_PARSE, "%s:%u: a key is at most %d bytes", c->api_key_file, lineno,
				       KEY_MAX);
			break;
		}
		line[n] = 0;
		if (n == 0 || line[0] == '#')
			continue;
		for (size_t i = 0; i < n; i++)
			if (line[i] <= ' ' || line[i] == 0x7f) {
				rc = mesh_errf(err, MESH_E_PARSE, "%s:%u: a key is printable bytes without spaces",
					       c->api_key_file, lineno);
				break;
			}
		if (!rc && (rc = add_key(gd, line, n)) < 0)
			mesh_errf(err, rc, "out of memory");
	}
	fclose(f);
	if (!rc && !gd->nkeys)
		rc = mesh_errf(err, MESH_E_PARSE, "the API key file '%s' names no key", c->api_key_file);
	if (rc)
		mesh__gw_guard_free(gd);
	return rc;
}

void mesh__gw_guard_free(struct mesh__gw_guard *gd)
{
	for (size_t i = 0; i < gd->nkeys; i++) {
		memset(gd->keys[i], 0, strlen(gd->keys[i]));
		free(gd->keys[i]);
	}
	free(gd->keys);
	gd->keys = NULL;
	gd->nkeys = 0;
}

/* 1 if the n bytes at s equal key, in time that depends on n and the
 * key's length only, not on where they differ. */
static int key_equal(const char *s, size_t n, const char *key)
{
	size_t kl = strlen(key);
	unsigned char diff = (unsigned char)(n != kl);
	for (size_t i = 0; i < KEY_MAX; i++) {
		unsigned char a = i < n ? (unsigned char)s[i] : 0, b = i < kl ? (unsigned char)key[i] : 0;
		diff |= (unsigned char)(a ^ b);
	}
	return diff == 0;
}

/* 1 if host (n bytes, "name[:port]" or "[v6][:port]") names this machine's
 * loopback: localhost, 127.0.0.0/8, ::1. */
static int loopback_host(const char *h, size_t n)
{
	char name[256];
	if (n == 0 || n >= sizeof name)
		return 0;
	memcpy(name, h, n);
	name[n] = 0;
	char *end = name;
	if (name[0] == '[') {
		end = strchr(name, ']');
		if (!end)
			return 0;
		*end = 0;
		return !strcmp(name + 1, "::1") && (end[1] == 0 || end[1] == ':');
	}
	end = strchr(name, ':');
	if (end)
		*end = 0;
	if (!strcasecmp(name, "localhost"))
		return 1;
	unsigned a, b, c, d;
	char extra;
	return sscanf(name, "%u.%u.%u.%u%c", &a, &b, &c, &d, &extra) == 4 && a == 127 && b < 256 && c < 256 && d < 256;
}

/* 1 if origin (n bytes, "scheme://host[:port]") may use the gateway. */
static int origin_ok(const char *o, size_t n, const char *const *allow, size_t nallow)
{
	for (size_t i = 0; i < nallow; i++)
		if (!strcmp(allow[i], "*") || (strlen(allow[i]) == n && !strncasecmp(allow[i], o, n)))
			return 1;
	const char *host = NULL;
	if (n > 7 && !strncasecmp(o, "http://", 7))
		host = o + 7;
	else if (n > 8 && !strncasecmp(o, "https://", 8))
		host = o + 8;
	return host && loopback_host(host, n - (size_t)(host - o));
}

/* 1 if v (n bytes) is a comma-separated list of tokens (what a browser
 * sends in Access-Control-Request-Headers), at most 1 KiB. */
static int token_list(const char *v, size_t n)
{
	if (!n || n > 1024)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!mesh_hframe_tchar((unsigned char)v[i]) && v[i] != ',' && v[i] != ' ' && v[i] != '\t')
			return 0;
	return 1;
}

#define FIELD_IS(lit) (nl == sizeof lit - 1 && !strncasecmp(name, lit, sizeof lit - 1))

int mesh__gw_guard_check(const struct mesh__gw_guard *gd, const char *const *allow, size_t nallow, const char *p,
			 size_t n, size_t at, int want_key, int options, struct mesh__gw_door *d, const char **why,
			 const char **code)
{
	const char *name, *val;
	size_t nl, vl;
	int key_ok = 0, have_auth = 0, host_bad = 0, origin_bad = 0, acrm = 0;
	memset(d, 0, sizeof *d);
	while (mesh_hframe_field(p, n, &at, &name, &nl, &val, &vl)) {
		if (FIELD_IS("Host")) {
			host_bad |= gd->check_host && !loopback_host(val, vl);
		} else if (FIELD_IS("Origin")) {
			if (origin_ok(val, vl, allow, nallow) && !origin_bad) {
				d->origin = val;
				d->norigin = vl;
			} else {
				origin_bad = 1;
				d->origin = NULL;
			}
		} else if (FIELD_IS("Authorization") && vl > 7 && !strncasecmp(val, "Bearer ", 7)) {
			have_auth = 1;
			for (size_t i = 0; i < gd->nkeys; i++)
				key_ok |= key_equal(val + 7, vl - 7, gd->keys[i]);
		} else if (FIELD_IS("Access-Control-Request-Method")) {
			acrm = 1;
		} else if (FIELD_IS("X-Request-Id")) {
			d->rid = mesh__gw_rid_ok(val, vl) ? val : NULL;
			d->nrid = vl;
		} else if (FIELD_IS("Access-Control-Request-Headers") && token_list(val, vl)) {
			d->req_headers = val;
			d->nreq_headers = vl;
		}
	}
	d->preflight = options && acrm && (d->origin || origin_bad);
	if (host_bad) {
		*why = "the gateway answers requests for a loopback host name only (localhost, 127.0.0.1, "
		       "[::1]); meshd --http-public serves other names";
		*code = "host_not_allowed";
		return 403;
	}
	if (origin_bad) {
		*why = "requests from this web page's origin are refused (meshd --http-allow-origin "
		       "names the origins allowed)";
		*code = "origin_not_allowed";
		return 403;
	}
	if (want_key && !d->preflight && gd->nkeys && !key_ok) {
		*why = have_auth ? "Incorrect API key provided (meshd --http-api-key-file lists the keys)"
				 : "You didn't provide an API key: send 'Authorization: Bearer KEY'";
		*code = "invalid_api_key";
		return 401;
	}
	return 0;
}
