// cube-test-libs: cube_static PkgConfig::CJSON
/* The trace writer keeps each device stream's track in the stream's order
 * (src/trace/trace_json.c): records of one stream come from different clocks
 * (CUPTI's kernel records, event pairs placed from an anchor no later than
 * they ran, the host clock around a transfer), and a record whose start was
 * estimated early must not show before the work it followed. Records with
 * their place in the stream's order are written in that order, none starting
 * before the one before it ended, starts only ever moved later, durations
 * kept; records without a place (order 0) and the host's tracks keep their
 * own times. Random records on several streams, in random arrival order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "json_file.h"
#include "trace/trace.h"

enum { STREAMS = 3, PER = 57, LOOSE = 9, HOSTS = 11 };

typedef struct {
  cube__trace_record_t r;
  int stream; /* -1: no place in an order */
} item_t;

static void shuffle(item_t* v, int n, uint64_t* seed) {
  for (int i = n - 1; i > 0; --i) {
    int j = (int)(cube_test_rand(seed) % (uint64_t)(i + 1));
    item_t t = v[i];
    v[i] = v[j];
    v[j] = t;
  }
}

/* The event named |name| in |events|. */
static const cJSON* find(const cJSON* events, const char* name) {
  const cJSON* e;
  cJSON_ArrayForEach(e, events) if (strcmp(cube_test_json_str(e, "name"), name) == 0 &&
                                    strcmp(cube_test_json_str(e, "ph"), "X") == 0) return e;
  return NULL;
}

CUBE_TEST(stream_tracks_follow_the_stream_order) {
  uint64_t seed = 0x7a11ce5eedull ^ (uint64_t)getpid();
  printf("seed %llu\n", (unsigned long long)seed);
  enum { N = STREAMS * PER + LOOSE + HOSTS };
  item_t* items = calloc(N, sizeof(*items));
  REQUIRE(items);
  int n = 0;
  const uint32_t pid = cube__trace_device_pid((cube_device_id_t){CUBE_BACKEND_CUDA, 0});
  /* Each stream: work one after another on the device (true starts), each
   * record's start then perturbed as a clock would err: an early estimate
   * (up to 3 us early) or a late one (up to 1 us late). */
  for (int s = 0; s < STREAMS; ++s) {
    uint64_t t = 1000000 + (uint64_t)s * 777;
    for (int i = 0; i < PER; ++i) {
      item_t* it = &items[n++];
      it->stream = s;
      it->r.pid = pid;
      it->r.tid = 10 + (uint64_t)s;
      it->r.kind = (uint32_t)(i % 3 == 0 ? CUBE__TRACE_COPY : CUBE__TRACE_KERNEL);
      it->r.order = (uint64_t)i + 1;
      it->r.dur_ns = 200 + cube_test_rand(&seed) % 5000;
      uint64_t err = cube_test_rand(&seed) % 4000;
      it->r.ts_ns = err < 3000 ? t - err : t + (err - 3000);
      snprintf(it->r.name, sizeof(it->r.name), "s%d_%d", s, i);
      t += it->r.dur_ns + cube_test_rand(&seed) % 3000;
    }
  }
  /* Records of a stream without a place (order 0): their own times. */
  for (int i = 0; i < LOOSE; ++i) {
    item_t* it = &items[n++];
    it->stream = -1;
    it->r.pid = pid;
    it->r.tid = 10;
    it->r.kind = CUBE__TRACE_GRAPH;
    it->r.ts_ns = 1000000 + cube_test_rand(&seed) % 200000;
    it->r.dur_ns = 100;
    snprintf(it->r.name, sizeof(it->r.name), "loose_%d", i);
  }
  /* Host records: overlapping ranges, never moved. */
  for (int i = 0; i < HOSTS; ++i) {
    item_t* it = &items[n++];
    it->stream = -1;
    it->r.pid = CUBE__TRACE_HOST_PID;
    it->r.tid = 1;
    it->r.kind = CUBE__TRACE_RANGE;
    it->r.order = (uint64_t)(HOSTS - i); /* a place is ignored on the host's tracks */
    it->r.ts_ns = 1000000 + (uint64_t)i * 10;
    it->r.dur_ns = 100000;
    snprintf(it->r.name, sizeof(it->r.name), "host_%d", i);
  }
  REQUIRE(n == N);
  shuffle(items, n, &seed);
  cube__trace_record_t* recs = calloc(N, sizeof(*recs));
  REQUIRE(recs);
  for (int i = 0; i < n; ++i) recs[i] = items[i].r;

  char path[256];
  snprintf(path, sizeof(path), "/tmp/cube_trace_order_%ld.json", (long)getpid());
  FILE* f = fopen(path, "w");
  REQUIRE(f);
  CHECK(cube__trace_write_json(fileno(f), recs, (uint64_t)n, 0, (uint64_t)n, NULL, NULL));
  fclose(f);
  cJSON* doc = cube_test_json_load(path);
  unlink(path);
  REQUIRE(doc);
  const cJSON* events = cJSON_GetObjectItemCaseSensitive(doc, "traceEvents");
  REQUIRE(cJSON_IsArray(events));
  double base = 1e300; /* the writer's zero: the smallest start of all */
  for (int i = 0; i < n; ++i)
    if ((double)items[i].r.ts_ns < base) base = (double)items[i].r.ts_ns;

  /* Per stream: in file order, the records appear in the stream's order;
   * each starts no earlier than the one before ended, and no earlier than
   * its own record said; durations unchanged. */
  for (int s = 0; s < STREAMS; ++s) {
    int pos_prev = -1;
    double end_prev = 0;
    for (int i = 0; i < PER; ++i) {
      char name[32];
      snprintf(name, sizeof(name), "s%d_%d", s, i);
      const item_t* it = NULL;
      for (int k = 0; k < n && !it; ++k)
        if (strcmp(items[k].r.name, name) == 0) it = &items[k];
      REQUIRE(it);
      int pos = 0, at = -1;
      const cJSON* e;
      cJSON_ArrayForEach(e, events) {
        if (strcmp(cube_test_json_str(e, "name"), name) == 0) at = pos;
        ++pos;
      }
      e = find(events, name);
      REQUIRE(e != NULL);
      double ts = cube_test_json_num(e, "ts"), dur = cube_test_json_num(e, "dur");
      double own = ((double)it->r.ts_ns - base) / 1000.0;
      CHECK(at > pos_prev);
      CHECK(ts >= own - 1e-6);
      CHECK(ts >= end_prev - 1e-6);
      CHECK(dur > (double)it->r.dur_ns / 1000.0 - 1e-6 && dur < (double)it->r.dur_ns / 1000.0 + 1e-6);
      pos_prev = at;
      end_prev = ts + dur;
    }
  }
  /* Without a place, and on the host: exactly the records' own starts. */
  for (int k = 0; k < n; ++k) {
    if (items[k].stream >= 0) continue;
    const cJSON* e = find(events, items[k].r.name);
    REQUIRE(e != NULL);
    CHECK(cube_test_json_num(e, "ts") > ((double)items[k].r.ts_ns - base) / 1000.0 - 1e-6 &&
          cube_test_json_num(e, "ts") < ((double)items[k].r.ts_ns - base) / 1000.0 + 1e-6);
  }
  cJSON_Delete(doc);
  free(recs);
  free(items);
}
