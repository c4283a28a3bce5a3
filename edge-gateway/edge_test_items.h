/*
 * edge_test_items: item frames for the edge's unit tests (stream_test,
 * streams_test, fanout_test), header only.
 */
#ifndef EDGE_TEST_ITEMS_H
#define EDGE_TEST_ITEMS_H

#include <stdlib.h>
#include <string.h>

#include "frame.h"

/*
 * Items seq from..to (at most cap) on topic, each carrying a JSON string
 * of data_len 'x's; one reference each (edge_test_items_unref).  Returns n.
 */
static inline size_t
edge_test_items(frame **out, size_t cap, uint64_t from, uint64_t to, const char *topic, size_t data_len)
{
	char *data = malloc(data_len + 3);
	size_t n = 0;

	data[0] = '"';
	memset(data + 1, 'x', data_len);
	data[data_len + 1] = '"';
	data[data_len + 2] = '\0';
	for (uint64_t s = from; s <= to && n < cap; s++)
		out[n++] = frame_item_new(s, topic, strlen(topic), NULL, 0, data, data_len + 2);
	free(data);
	return n;
}

static inline void
edge_test_items_unref(frame **fs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		frame_unref(fs[i]);
}

#endif
