/*
 * C smoke test of libingero_fleet: every exported function, including NULL and bad-length
 * calls, compiled with -Wall -Wextra -Werror and run under AddressSanitizer (leaks included)
 * by ffi/tests/c_smoke.rs.
 *
 * usage: smoke BATCH_FILE
 *   BATCH_FILE: OTLP protobuf of one cluster ("alpha", 8 agent pushes, one straggler).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ingero_fleet.h"

static int failures = 0;

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
      failures++;                                                                \
    }                                                                            \
  } while (0)

#define CHECK_RC(call, want)                                                     \
  do {                                                                           \
    ingero_result rc_ = (call);                                                  \
    if (rc_ != (ingero_result)(want)) {                                          \
      fprintf(stderr, "%s:%d: %s returned %u (%s), want %u; last error: %s\n",   \
              __FILE__, __LINE__, #call, (unsigned)rc_,                          \
              ingero_result_message(rc_), (unsigned)(want), last_error());       \
      failures++;                                                                \
    }                                                                            \
  } while (0)

#define S(str) (const uint8_t *)(str), strlen(str)

/* The last error as a NUL-terminated string in a static buffer. */
static const char *last_error(void) {
  static char text[4096];
  ingero_buf b = {NULL, 0};
  if (ingero_last_error(&b) != INGERO_OK) return "(ingero_last_error failed)";
  size_t n = b.len < sizeof text - 1 ? b.len : sizeof text - 1;
  if (n > 0) memcpy(text, b.ptr, n);
  text[n] = '\0';
  ingero_buf_free(&b);
  return text;
}

static int buf_contains(const ingero_buf *b, const char *needle) {
  size_t n = strlen(needle);
  if (b->ptr == NULL || b->len < n) return 0;
  for (size_t i = 0; i + n <= b->len; i++)
    if (memcmp(b->ptr + i, needle, n) == 0) return 1;
  return 0;
}

static uint8_t *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *data = malloc(size > 0 ? (size_t)size : 1);
  if (data && size > 0 && fread(data, 1, (size_t)size, f) != (size_t)size) {
    free(data);
    data = NULL;
  }
  fclose(f);
  *len = size > 0 ? (size_t)size : 0;
  return data;
}

static void test_library_info(void) {
  CHECK(ingero_abi_version() == INGERO_ABI_VERSION);
  CHECK(ingero_version() != NULL && strlen(ingero_version()) > 0);
  for (uint32_t code = 0; code <= INGERO_ERR_WRONG_KIND; code++) {
    const char *m = ingero_result_message(code);
    CHECK(m != NULL && strcmp(m, "unknown result code") != 0);
  }
  CHECK(strcmp(ingero_result_message(999), "unknown result code") == 0);
  CHECK_RC(ingero_last_error(NULL), INGERO_ERR_NULL_ARGUMENT);
  ingero_buf_free(NULL);
  ingero_processor_free(NULL);
  ingero_extension_free(NULL);
  ingero_http_response_free(NULL);
}

static void test_config_validation(void) {
  CHECK_RC(ingero_config_validate(S("ingero"), NULL, 0), INGERO_OK);
  CHECK_RC(ingero_config_validate(S("ingero_threshold"), S("{}")), INGERO_OK);
  CHECK_RC(ingero_config_validate(S("ingero"), S("threshold:\n  k: -1\n  ema_alpha: 7\n")),
           INGERO_ERR_INVALID_CONFIG);
  const char *msg = last_error();
  CHECK(strstr(msg, "threshold.k: ") != NULL);
  CHECK(strstr(msg, "threshold.ema_alpha: ") != NULL);
  CHECK_RC(ingero_config_validate(S("nope"), NULL, 0), INGERO_ERR_UNKNOWN_TYPE);
  CHECK_RC(ingero_config_validate(NULL, 5, NULL, 0), INGERO_ERR_NULL_ARGUMENT);
  CHECK_RC(ingero_config_validate((const uint8_t *)"ingero", SIZE_MAX, NULL, 0),
           INGERO_ERR_INVALID_LENGTH);
  CHECK_RC(ingero_config_validate(S("ingero"), (const uint8_t *)"x", INGERO_MAX_CONFIG_BYTES + 1),
           INGERO_ERR_INVALID_LENGTH);
  const uint8_t bad_utf8[] = {'i', 0xff};
  CHECK_RC(ingero_config_validate(bad_utf8, sizeof bad_utf8, NULL, 0), INGERO_ERR_INVALID_UTF8);
}

static void test_constructors_refuse_bad_arguments(void) {
  ingero_processor *p = (ingero_processor *)0x1; /* must stay untouched on failure */
  CHECK_RC(ingero_processor_new(NULL, 6, NULL, 0, &p), INGERO_ERR_NULL_ARGUMENT);
  CHECK_RC(ingero_processor_new((const uint8_t *)"ingero", SIZE_MAX, NULL, 0, &p),
           INGERO_ERR_INVALID_LENGTH);
  CHECK_RC(ingero_processor_new(S("ingero"), NULL, 0, NULL), INGERO_ERR_NULL_ARGUMENT);
  CHECK_RC(ingero_processor_new(S("ingero_threshold"), NULL, 0, &p), INGERO_ERR_WRONG_KIND);
  CHECK_RC(ingero_processor_new(S("batch"), NULL, 0, &p), INGERO_ERR_UNKNOWN_TYPE);
  CHECK_RC(ingero_processor_new(S("ingero"), S("push_interval: soon\n"), &p),
           INGERO_ERR_INVALID_CONFIG);
  CHECK(strstr(last_error(), "push_interval") != NULL);
  CHECK(p == (ingero_processor *)0x1);

  ingero_extension *e = (ingero_extension *)0x1;
  CHECK_RC(ingero_extension_new(S("ingero"), NULL, 0, &e), INGERO_ERR_WRONG_KIND);
  CHECK_RC(ingero_extension_new(NULL, 3, NULL, 0, &e), INGERO_ERR_NULL_ARGUMENT);
  CHECK_RC(ingero_extension_new(S("ingero_threshold"), S("max_clusters: 0\n"), &e),
           INGERO_ERR_INVALID_CONFIG);
  CHECK_RC(ingero_extension_new(S("ingero_threshold"), NULL, 0, NULL), INGERO_ERR_NULL_ARGUMENT);
  CHECK(e == (ingero_extension *)0x1);
}

static void test_cluster_helpers(void) {
  ingero_buf b = {NULL, 0};
  CHECK_RC(ingero_query_cluster(S("a=1&cluster_id=prod%2Deu"), &b), INGERO_OK);
  CHECK(b.len == 7 && memcmp(b.ptr, "prod-eu", 7) == 0);
  ingero_buf_free(&b);
  CHECK(b.ptr == NULL && b.len == 0);
  ingero_buf_free(&b); /* twice through the same struct: no-op */
  CHECK_RC(ingero_query_cluster(NULL, 0, &b), INGERO_OK);
  CHECK(b.ptr == NULL && b.len == 0);
  CHECK_RC(ingero_query_cluster(S("cluster_id=a&cluster_id=b"), &b), INGERO_ERR_INVALID_ARGUMENT);
  CHECK(strcmp(last_error(), "cluster_id: query parameter cluster_id given more than once") == 0);
  CHECK_RC(ingero_query_cluster(S("cluster_id=x"), NULL), INGERO_ERR_NULL_ARGUMENT);
  CHECK_RC(ingero_query_cluster(NULL, 4, &b), INGERO_ERR_NULL_ARGUMENT);
  CHECK_RC(ingero_query_cluster((const uint8_t *)"x", INGERO_MAX_QUERY_BYTES + 1, &b),
           INGERO_ERR_INVALID_LENGTH);
  CHECK_RC(ingero_validate_header_cluster_id(S("gamma")), INGERO_OK);
  CHECK_RC(ingero_validate_header_cluster_id(S("bad\r\nid")), INGERO_ERR_INVALID_ARGUMENT);
  CHECK_RC(ingero_validate_header_cluster_id(NULL, 1), INGERO_ERR_NULL_ARGUMENT);
  CHECK_RC(ingero_validate_cluster_id(S("prod")), INGERO_OK);
  CHECK_RC(ingero_validate_cluster_id(NULL, 0), INGERO_ERR_INVALID_ARGUMENT);
  CHECK(strcmp(last_error(), "cluster_id is empty") == 0);
  CHECK_RC(ingero_validate_cluster_id((const uint8_t *)"x", SIZE_MAX), INGERO_ERR_INVALID_LENGTH);
}

static void check_route(const ingero_extension *e, int admin, const char *method,
                        const char *path, const char *query, uint16_t want_status,
                        const char *want_body_part) {
  ingero_http_response r = {0, {NULL, 0}, {NULL, 0}, {NULL, 0}};
  if (admin)
    CHECK_RC(ingero_extension_route_admin(e, S(method), S(path), S(query), &r), INGERO_OK);
  else
    CHECK_RC(ingero_extension_route_agent(e, S(method), S(path), S(query), &r), INGERO_OK);
  if (r.status != want_status) {
    fprintf(stderr, "%s %s?%s: status %u, want %u\n", method, path, query, r.status, want_status);
    failures++;
  }
  CHECK(buf_contains(&r.content_type, "application/json"));
  CHECK(buf_contains(&r.headers, "Cache-Control: no-store\n"));
  if (want_body_part) CHECK(buf_contains(&r.body, want_body_part));
  ingero_http_response_free(&r);
  CHECK(r.status == 0 && r.body.ptr == NULL && r.headers.ptr == NULL);
  ingero_http_response_free(&r);
}

static void test_pipeline(const uint8_t *batch, size_t batch_len) {
  ingero_extension *ext = NULL;
  CHECK_RC(ingero_extension_new(S("ingero_threshold"),
                                S("agent_endpoint: 127.0.0.1:0\nadmin_endpoint: \"\"\n"), &ext),
           INGERO_OK);
  if (!ext) return;
  CHECK_RC(ingero_extension_start(ext), INGERO_OK);
  CHECK_RC(ingero_extension_start(NULL), INGERO_ERR_NULL_ARGUMENT);
  ingero_buf cfg = {NULL, 0};
  CHECK_RC(ingero_extension_config_json(ext, &cfg), INGERO_OK);
  CHECK(buf_contains(&cfg, "\"agent_endpoint\":\"127.0.0.1:0\""));
  ingero_buf_free(&cfg);
  CHECK_RC(ingero_extension_config_json(ext, NULL), INGERO_ERR_NULL_ARGUMENT);

  ingero_processor *procs[3] = {NULL, NULL, NULL};
  CHECK_RC(ingero_processor_new(S("ingero"), S("{\"push_interval\": \"1s\"}"), &procs[0]), INGERO_OK);
  CHECK_RC(ingero_processor_new(S("provider_lookup/gpu"), NULL, 0, &procs[1]), INGERO_OK);
  CHECK_RC(ingero_processor_new(S("nccl_peer_lag"), NULL, 0, &procs[2]), INGERO_OK);
  for (int i = 0; i < 3; i++)
    if (!procs[i]) return;
  ingero_processor *p = procs[0];

  uint64_t nanos = 0;
  CHECK_RC(ingero_processor_tick_interval_nanos(p, &nanos), INGERO_OK);
  CHECK(nanos == 1000000000ull);
  CHECK_RC(ingero_processor_tick_interval_nanos(p, NULL), INGERO_ERR_NULL_ARGUMENT);
  CHECK_RC(ingero_processor_tick_interval_nanos(NULL, &nanos), INGERO_ERR_NULL_ARGUMENT);

  const ingero_extension *exts[1] = {ext};
  CHECK_RC(ingero_processor_start(p, NULL, 1), INGERO_ERR_NULL_ARGUMENT);
  CHECK_RC(ingero_processor_start(p, exts, INGERO_MAX_EXTENSIONS + 1), INGERO_ERR_INVALID_LENGTH);
  const ingero_extension *null_exts[1] = {NULL};
  CHECK_RC(ingero_processor_start(p, null_exts, 1), INGERO_ERR_NULL_ARGUMENT);
  CHECK_RC(ingero_processor_start(NULL, exts, 1), INGERO_ERR_NULL_ARGUMENT);
  for (int i = 0; i < 3; i++) CHECK_RC(ingero_processor_start(procs[i], exts, 1), INGERO_OK);

  /* Cold start: no headers, the zero body. */
  ingero_push_headers h;
  memset(&h, 0, sizeof h);
  CHECK_RC(ingero_extension_push_headers(ext, S("alpha"), &h), INGERO_NO_THRESHOLD);
  CHECK(h.threshold_len == 0);
  check_route(ext, 0, "GET", "/api/v1/threshold", "cluster_id=alpha", 200,
              "{\"threshold\":0,\"quorum_met\":false}");

  const uint64_t t0 = 1763769600000000000ull;
  for (uint64_t tick = 0; tick < 3; tick++) {
    uint64_t now = t0 + tick * 1000000000ull;
    for (int i = 0; i < 3; i++) {
      ingero_process_result r;
      memset(&r, 0, sizeof r);
      CHECK_RC(ingero_processor_process(procs[i], batch, batch_len, S("alpha"), now, &r), INGERO_OK);
      CHECK(r.rejected_points == 0);
      if (i == 0) CHECK(!r.modified && r.data.ptr == NULL);
      ingero_buf_free(&r.data);
    }
    for (int i = 0; i < 3; i++) {
      ingero_buf out = {NULL, 0};
      CHECK_RC(ingero_processor_tick(procs[i], now + 500000000ull, &out), INGERO_OK);
      if (i == 0) CHECK(buf_contains(&out, "ingero.fleet.node.straggler"));
      ingero_buf_free(&out);
    }
  }

  /* Bad batches change nothing and write no output. */
  ingero_process_result untouched = {true, {NULL, 0}, 42};
  const uint8_t garbage[] = {0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f};
  CHECK_RC(ingero_processor_process(p, garbage, sizeof garbage, NULL, 0, t0, &untouched),
           INGERO_ERR_DECODE);
  CHECK_RC(ingero_processor_process(p, NULL, 10, NULL, 0, t0, &untouched), INGERO_ERR_NULL_ARGUMENT);
  CHECK_RC(ingero_processor_process(p, batch, SIZE_MAX, NULL, 0, t0, &untouched),
           INGERO_ERR_INVALID_LENGTH);
  CHECK_RC(ingero_processor_process(p, batch, batch_len, NULL, 3, t0, &untouched),
           INGERO_ERR_NULL_ARGUMENT);
  CHECK_RC(ingero_processor_process(p, batch, batch_len, NULL, 0, t0, NULL), INGERO_ERR_NULL_ARGUMENT);
  CHECK_RC(ingero_processor_process(NULL, batch, batch_len, NULL, 0, t0, &untouched),
           INGERO_ERR_NULL_ARGUMENT);
  CHECK(untouched.modified && untouched.rejected_points == 42 && untouched.data.ptr == NULL);
  CHECK_RC(ingero_processor_tick(p, t0, NULL), INGERO_ERR_NULL_ARGUMENT);
  CHECK_RC(ingero_processor_tick(NULL, t0, &untouched.data), INGERO_ERR_NULL_ARGUMENT);

  /* The threshold, its headers and the GET answer agree. */
  CHECK_RC(ingero_extension_push_headers(ext, S("alpha"), &h), INGERO_OK);
  CHECK(h.threshold_len > 2 && h.threshold_len < INGERO_HEADER_VALUE_CAP);
  CHECK(h.quorum_met_len == 4 && memcmp(h.quorum_met, "true", 4) == 0);
  char text[INGERO_HEADER_VALUE_CAP + 1];
  memcpy(text, h.threshold, h.threshold_len);
  text[h.threshold_len] = '\0';
  double value = strtod(text, NULL);
  CHECK(value > 0.60 && value < 0.94);
  ingero_threshold th = {0.0, false};
  CHECK_RC(ingero_extension_threshold(ext, S("alpha"), &th), INGERO_OK);
  CHECK(th.threshold == value && th.quorum_met);
  CHECK_RC(ingero_extension_threshold(ext, S("nobody"), &th), INGERO_NO_THRESHOLD);
  CHECK_RC(ingero_extension_threshold(ext, S("bad\nid"), &th), INGERO_ERR_INVALID_ARGUMENT);
  CHECK_RC(ingero_extension_threshold(ext, S("alpha"), NULL), INGERO_ERR_NULL_ARGUMENT);
  CHECK_RC(ingero_extension_threshold(NULL, S("alpha"), &th), INGERO_ERR_NULL_ARGUMENT);
  CHECK_RC(ingero_extension_push_headers(ext, S(""), &h), INGERO_ERR_INVALID_ARGUMENT);
  CHECK_RC(ingero_extension_push_headers(ext, NULL, 9, &h), INGERO_ERR_NULL_ARGUMENT);
  CHECK_RC(ingero_extension_push_headers(ext, S("alpha"), NULL), INGERO_ERR_NULL_ARGUMENT);
  char want_body[96];
  snprintf(want_body, sizeof want_body, "{\"threshold\":%s,\"quorum_met\":true}", text);
  check_route(ext, 0, "GET", "/api/v1/threshold", "cluster_id=alpha", 200, want_body);
  check_route(ext, 0, "POST", "/api/v1/threshold", "cluster_id=alpha", 405, "method not allowed");
  check_route(ext, 0, "GET", "/api/v1/threshold", "", 400, "cluster_id");
  check_route(ext, 0, "GET", "/nowhere", "", 404, "not found");
  check_route(ext, 1, "GET", "/api/v1/diagnostics", "cluster_id=alpha", 200, "alpha-node-07");
  check_route(ext, 1, "GET", "/api/v1/diagnostics", "", 200, "\"cluster_count\":1");
  ingero_http_response r = {7, {NULL, 0}, {NULL, 0}, {NULL, 0}};
  CHECK_RC(ingero_extension_route_agent(ext, NULL, 3, S("/"), NULL, 0, &r), INGERO_ERR_NULL_ARGUMENT);
  CHECK_RC(ingero_extension_route_admin(ext, S("GET"), S("/"), NULL, 0, NULL), INGERO_ERR_NULL_ARGUMENT);
  CHECK_RC(ingero_extension_route_agent(NULL, S("GET"), S("/"), NULL, 0, &r), INGERO_ERR_NULL_ARGUMENT);
  CHECK_RC(ingero_extension_route_admin(ext, S("GET"), (const uint8_t *)"/", SIZE_MAX, NULL, 0, &r),
           INGERO_ERR_INVALID_LENGTH);
  CHECK(r.status == 7);

  /* Telemetry and diagnostics. */
  ingero_buf j = {NULL, 0};
  CHECK_RC(ingero_processor_telemetry_json(p, &j), INGERO_OK);
  CHECK(buf_contains(&j, "\"name\":\"ingero_fleet_threshold\""));
  CHECK(buf_contains(&j, "\"name\":\"ingero_fleet_stragglers\""));
  ingero_buf_free(&j);
  for (int i = 1; i < 3; i++) {
    CHECK_RC(ingero_processor_telemetry_json(procs[i], &j), INGERO_OK);
    CHECK(j.len > 2 && j.ptr[0] == '[');
    ingero_buf_free(&j);
  }
  CHECK_RC(ingero_processor_telemetry_json(p, NULL), INGERO_ERR_NULL_ARGUMENT);
  CHECK_RC(ingero_extension_telemetry_json(ext, &j), INGERO_OK);
  CHECK(buf_contains(&j, "ingero_threshold_headers_total"));
  ingero_buf_free(&j);
  CHECK_RC(ingero_extension_telemetry_json(NULL, &j), INGERO_ERR_NULL_ARGUMENT);
  CHECK_RC(ingero_processor_diagnostics_json(p, &j), INGERO_OK);
  CHECK(buf_contains(&j, "alpha"));
  ingero_buf_free(&j);
  CHECK_RC(ingero_processor_diagnostics_json(NULL, &j), INGERO_ERR_NULL_ARGUMENT);

  /* Shutdown twice is safe; free the extension before the processors (they keep the store). */
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < 3; i++) CHECK_RC(ingero_processor_shutdown(procs[i]), INGERO_OK);
    CHECK_RC(ingero_extension_shutdown(ext), INGERO_OK);
  }
  CHECK_RC(ingero_processor_shutdown(NULL), INGERO_ERR_NULL_ARGUMENT);
  CHECK_RC(ingero_extension_shutdown(NULL), INGERO_ERR_NULL_ARGUMENT);
  CHECK_RC(ingero_processor_start(p, exts, 1), INGERO_OK);
  ingero_extension_free(ext);
  ingero_buf out = {NULL, 0};
  CHECK_RC(ingero_processor_tick(p, t0 + 60000000000ull, &out), INGERO_OK);
  ingero_buf_free(&out);
  CHECK_RC(ingero_processor_shutdown(p), INGERO_OK);
  for (int i = 0; i < 3; i++) ingero_processor_free(procs[i]);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s BATCH_FILE\n", argv[0]);
    return 2;
  }
  size_t batch_len = 0;
  uint8_t *batch = read_file(argv[1], &batch_len);
  if (!batch || batch_len == 0) {
    fprintf(stderr, "cannot read %s\n", argv[1]);
    return 2;
  }
  test_library_info();
  test_config_validation();
  test_constructors_refuse_bad_arguments();
  test_cluster_helpers();
  test_pipeline(batch, batch_len);
  free(batch);
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("c smoke test: all checks passed\n");
  return 0;
}
