/*
 * st_keywatch: a rotated key file is reloaded by a poll, the way a
 * Kubernetes Secret update reaches a pod (a new file behind the path, put
 * there by rename); an unchanged file is not reloaded; a file caught
 * half-written keeps the keys in use; a missing file keeps them too.  The
 * poll is called directly: no timer, no sleep.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "st_keywatch.h"
#include "st_test.h"

/* The set-up this test needs: no point going on without it. */
#define REQUIRE(x)                                                                        \
	do {                                                                              \
		if (!(x)) {                                                               \
			fprintf(stderr, "%s:%d: required: %s\n", __FILE__, __LINE__, #x); \
			exit(1);                                                          \
		}                                                                         \
	} while (0)

#define KEY_A "{\"kty\":\"oct\",\"kid\":\"a\",\"alg\":\"HS256\",\"k\":\"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY\"}"
#define KEY_B "{\"kty\":\"oct\",\"kid\":\"b\",\"alg\":\"HS256\",\"k\":\"ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA\"}"

static char dir[] = "/tmp/st_keywatch_test.XXXXXX";
static char path[256];

/* Writes doc to a new file and renames it over path: a new inode, as the kubelet's swap gives. */
static void
put(const char *doc)
{
	char tmp[300];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s/new.json", dir);
	REQUIRE((f = fopen(tmp, "w")) != NULL);
	REQUIRE(fputs(doc, f) >= 0 && fclose(f) == 0);
	REQUIRE(rename(tmp, path) == 0);
}

static void
t_rotation_is_reloaded_once(void)
{
	struct event_base *base = event_base_new();
	st_auth_config cfg = { .policy = { .leeway_s = 0 }, .wall = st_clock_realtime() };
	st_auth_keys *ks = NULL;
	st_auth_store *store;
	st_keywatch *kw;
	char why[256];

	put("{\"keys\":[" KEY_A "]}");
	REQUIRE(st_auth_keys_load(path, &ks, why, sizeof(why)) == ST_OK);
	store = st_auth_store_new(ks, &cfg);
	REQUIRE((kw = st_keywatch_new(base, store, path, "--auth-keys", 0)) != NULL);

	ST_CHECK(!st_keywatch_poll(kw)); /* the file loaded at start */
	put("{\"keys\":[" KEY_A "," KEY_B "]}");
	ST_CHECK(st_keywatch_poll(kw));
	ST_CHECK_EQ_U64(st_auth_store_key_count(store), 2);
	ST_CHECK(!st_keywatch_poll(kw)); /* unchanged: not loaded again */
	ST_CHECK_EQ_U64(st_keywatch_changes(kw), 1);

	put("{\"keys\":[" KEY_B); /* half-written: the keys in use stay */
	ST_CHECK(st_keywatch_poll(kw));
	ST_CHECK_EQ_U64(st_auth_store_key_count(store), 2);

	REQUIRE(unlink(path) == 0); /* gone for a moment: the keys in use stay */
	ST_CHECK(!st_keywatch_poll(kw));
	ST_CHECK_EQ_U64(st_auth_store_key_count(store), 2);

	put("{\"keys\":[" KEY_B "]}"); /* the rotation done: only the new key */
	ST_CHECK(st_keywatch_poll(kw));
	ST_CHECK_EQ_U64(st_auth_store_key_count(store), 1);
	ST_CHECK_EQ_U64(st_keywatch_changes(kw), 3);

	/* on demand (SIGHUP, `reload`): the same load */
	ST_CHECK(st_keywatch_reload(kw, why, sizeof(why)) == ST_OK);
	st_keywatch_free(kw);
	st_auth_store_free(store);
	event_base_free(base);
}

int
main(void)
{
	if (mkdtemp(dir) == NULL) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(path, sizeof(path), "%s/jwks.json", dir);
	ST_RUN(t_rotation_is_reloaded_once);
	unlink(path);
	rmdir(dir);
	return st_test_done();
}
