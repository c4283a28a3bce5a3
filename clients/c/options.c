/*
 * options: studio_options_* (studio_producer.h), the producer's settings
 * by name.  Every number is checked against its range here, when it is
 * set, so that nothing above INT32_MAX reaches nng as a duration (nng's
 * durations are int32 ms: a larger value would wrap into a negative one).
 * Strings are copied (st_try_*: out of memory is STUDIO_NOMEM, never an
 * abort of the host program); the TLS paths are only read by
 * studio_producer_new (dial.c).
 */
#include "options.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "detail.h"
#include "st_clock.h"
#include "st_util.h"
#include "wire.h"

#define DEFAULT_TRY_TIMEOUT_MS 10000u
#define DEFAULT_BACKOFF_BASE_MS 100u
#define DEFAULT_BACKOFF_CAP_MS 5000u
#define DEFAULT_MAX_INFLIGHT 64u
#define MAX_INFLIGHT 65536u

/* The default clock: the project's monotonic one (the hook's signature takes the test's arg). */
static uint64_t
mono_ms(void *arg)
{
	(void)arg;
	return st_clock_now(st_clock_system());
}

void
options_defaults(studio_options *o)
{
	memset(o, 0, sizeof(*o));
	o->try_timeout_ms = DEFAULT_TRY_TIMEOUT_MS;
	o->backoff_base_ms = DEFAULT_BACKOFF_BASE_MS;
	o->backoff_cap_ms = DEFAULT_BACKOFF_CAP_MS;
	o->max_inflight = DEFAULT_MAX_INFLIGHT;
	o->clock_ms = mono_ms;
}

uint64_t
options_now_ms(const studio_options *o)
{
	return o->clock_ms(o->test_arg);
}

void
options_hooks_set(studio_options *o, uint64_t (*clock_ms)(void *), uint64_t (*random64)(void *), void *arg)
{
	o->clock_ms = clock_ms != NULL ? clock_ms : mono_ms;
	o->random64 = random64;
	o->test_arg = arg;
}

studio_options *
studio_options_new(void)
{
	studio_options *o = st_try_malloc(sizeof(*o));

	if (o != NULL)
		options_defaults(o);
	return o;
}

void
studio_options_free(studio_options *o)
{
	if (o == NULL)
		return;
	free(o->tls_ca);
	free(o->tls_cert);
	free(o->tls_key);
	free(o->token);
	free(o);
}

/* A decimal in lo..hi, nothing else (no sign, no space, no suffix). */
static bool
parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
	uint64_t v = 0;

	if (*s == '\0')
		return false;
	for (; *s != '\0'; s++) {
		if (*s < '0' || *s > '9')
			return false;
		v = v * 10 + (uint64_t)(*s - '0');
		if (v > hi)
			return false;
	}
	if (v < lo)
		return false;
	*out = (uint32_t)v;
	return true;
}

studio_status
studio_options_set(studio_options *o, const char *name, const char *value, char *err, size_t err_len)
{
	static const struct {
		const char *name;
		size_t off;
		uint32_t hi;
	} nums[] = {
		{ "try_timeout_ms", offsetof(studio_options, try_timeout_ms), INT32_MAX },
		{ "backoff_base_ms", offsetof(studio_options, backoff_base_ms), INT32_MAX },
		{ "backoff_cap_ms", offsetof(studio_options, backoff_cap_ms), INT32_MAX },
		{ "max_inflight", offsetof(studio_options, max_inflight), MAX_INFLIGHT },
	};
	char **str = NULL;

	if (o == NULL || name == NULL || value == NULL) {
		detail_say(err, err_len, "options, name and value are required");
		return STUDIO_USAGE;
	}
	for (size_t i = 0; i < ST_ARRAY_LEN(nums); i++) {
		if (strcmp(name, nums[i].name) != 0)
			continue;
		/* nng durations are int32 ms: anything above INT32_MAX would wrap into a negative one */
		if (!parse_u32(value, 1, nums[i].hi, (uint32_t *)(void *)((char *)o + nums[i].off))) {
			detail_say(err, err_len, "option %s: \"%.40s\" is not a whole number in 1..%u", name, value,
				   nums[i].hi);
			return STUDIO_USAGE;
		}
		return STUDIO_OK;
	}
	if (strcmp(name, "keys") == 0) {
		if (strcmp(value, "on") != 0 && strcmp(value, "off") != 0) {
			detail_say(err, err_len, "option keys: \"%.40s\" is not on or off", value);
			return STUDIO_USAGE;
		}
		o->no_keys = strcmp(value, "off") == 0;
		return STUDIO_OK;
	}
	if (strcmp(name, "tls_ca") == 0)
		str = &o->tls_ca;
	else if (strcmp(name, "tls_cert") == 0)
		str = &o->tls_cert;
	else if (strcmp(name, "tls_key") == 0)
		str = &o->tls_key;
	else if (strcmp(name, "token") == 0) {
		if (strlen(value) > PROTO_MAX_TOKEN) {
			detail_say(err, err_len, "option token: longer than %u bytes", PROTO_MAX_TOKEN);
			return STUDIO_USAGE;
		}
		str = &o->token;
	}
	if (str == NULL) {
		detail_say(err, err_len, "unknown option \"%.60s\"", name);
		return STUDIO_USAGE;
	}
	free(*str);
	*str = NULL;
	if (value[0] != '\0' && (*str = st_try_strndup(value, strlen(value))) == NULL) {
		detail_say(err, err_len, "option %s: out of memory", name);
		return STUDIO_NOMEM;
	}
	return STUDIO_OK;
}

studio_status
studio_options_set_token_fn(studio_options *o, studio_token_fn fn, void *arg)
{
	if (o == NULL)
		return STUDIO_USAGE;
	o->token_fn = fn;
	o->token_arg = arg;
	return STUDIO_OK;
}
