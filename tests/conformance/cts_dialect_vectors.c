/* The dialect's vector types (docs/dialect.md, "Vector types"): float2,
 * float4, int2, int4, uint2, uint4 loaded from and stored to scalar buffers
 * with CUBE_VLOAD / CUBE_VSTORE, element access, constructors and arithmetic,
 * on random data of odd lengths whose tail (not a whole vector) the kernel
 * handles element by element, through views that start one element into
 * their buffer (no vector alignment); results against the host, integers bit
 * for bit, floats within rounding. Then the bounds of a whole vector per
 * execution mode, and a width chosen from cube_client_io_optimized_vector_sizes. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cts.h"

/* out = f(a, b, s) element by element, lane = element % W: one vector per
 * unit, and the unit after the last whole vector does the tail. V, E, W and
 * LANES (the vector (0, 1, ...)) are defines; the scalar parameter's type is
 * written in (%s: a kernel's scalar parameters are not read through defines). */
static const char* k_vec_mix =
    "CUBE_FN E vec_lane(E t, E x, E y, uint32_t lane) {\n"
    "  return lane == 0 ? t + (E)1 : lane == 1 ? x - t : lane == 2 ? t * y : (E)0 - t;\n"
    "}\n"
    "CUBE_KERNEL(vec_mix, CUBE_ARRAY(const E, a), CUBE_ARRAY(const E, b), CUBE_ARRAY(E, out),\n"
    "            %s s) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  uint64_t nv = CUBE_LEN(out) / W;\n"
    "  if (i < nv) {\n"
    "    V x = CUBE_VLOAD(V, a, i);\n"
    "    V y = CUBE_VLOAD(V, b, i);\n"
    "    V r = s * (x + y) - x / y + LANES;\n"
    "    r -= s;\n"
    "    r.x = r.x + (E)1;\n"
    "    r.y = x.y - r.y;\n"
    "#if W == 4\n"
    "    r.z = r.z * y.z;\n"
    "    r.w = (E)0 - r.w;\n"
    "#endif\n"
    "    CUBE_VSTORE(V, out, i, r);\n"
    "  } else if (i == nv) {\n"
    "    for (uint64_t k = nv * W; k < CUBE_LEN(out); ++k) {\n"
    "      E x = CUBE_LOAD(a, k), y = CUBE_LOAD(b, k);\n"
    "      E t = s * (x + y) - x / y + (E)(k - nv * W);\n"
    "      t -= s;\n"
    "      CUBE_STORE(out, k, vec_lane(t, x, y, (uint32_t)(k - nv * W)));\n"
    "    }\n"
    "  }\n"
    "}\n";

typedef enum { VK_FLOAT, VK_INT, VK_UINT } vkind_t;

typedef struct vtype {
  const char* name;  /* "float4" */
  const char* elem;  /* "float", "int32_t", "uint32_t" */
  const char* lanes; /* make_float4(0, 1, 2, 3) */
  vkind_t kind;
  uint32_t width;
} vtype_t;

static const vtype_t k_vtypes[] = {
    {"float2", "float", "make_float2(0, 1)", VK_FLOAT, 2},
    {"float4", "float", "make_float4(0, 1, 2, 3)", VK_FLOAT, 4},
    {"int2", "int32_t", "make_int2(0, 1)", VK_INT, 2},
    {"int4", "int32_t", "make_int4(0, 1, 2, 3)", VK_INT, 4},
    {"uint2", "uint32_t", "make_uint2(0, 1)", VK_UINT, 2},
    {"uint4", "uint32_t", "make_uint4(0, 1, 2, 3)", VK_UINT, 4},
};

static const vtype_t* vtype_named(const char* name) {
  for (size_t i = 0; i < sizeof(k_vtypes) / sizeof(k_vtypes[0]); ++i)
    if (strcmp(k_vtypes[i].name, name) == 0) return &k_vtypes[i];
  return NULL;
}

static cube_status_t vk_create(const char* source, const char* entry, const vtype_t* t,
                               uint32_t dim, cube_kernel_t** out) {
  char w[16];
  snprintf(w, sizeof w, "%u", (unsigned)t->width);
  cube_define_t defs[4] = {{"V", t->name}, {"E", t->elem}, {"W", w}, {"LANES", t->lanes}};
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.cube_dim = (cube_dim_t){dim, 1, 1};
  d.source = source;
  d.entry = entry;
  d.defines = defs;
  d.define_count = 4;
  return cube_kernel_create(&d, out);
}

static float frand(uint64_t* s, float lo, float hi) {
  double u = (double)(cube_test_rand(s) >> 11) / 9007199254740992.0;
  return (float)(lo + (hi - lo) * u);
}

/* The host's f for one element (integers: exactly the kernel's arithmetic). */
static int32_t host_i32(int32_t x, int32_t y, int32_t s, uint32_t lane) {
  int32_t t = s * (x + y) - x / y + (int32_t)lane;
  t -= s;
  return lane == 0 ? t + 1 : lane == 1 ? x - t : lane == 2 ? t * y : 0 - t;
}
static uint32_t host_u32(uint32_t x, uint32_t y, uint32_t s, uint32_t lane) {
  uint32_t t = s * (x + y) - x / y + lane;
  t -= s;
  return lane == 0 ? t + 1u : lane == 1 ? x - t : lane == 2 ? t * y : 0u - t;
}
/* Floats: in double, with a bound on the rounding of the float steps (each
 * within a few ulps of the magnitudes it combines; FMA contraction allowed). */
static int host_f32_close(float got, float x, float y, float s, uint32_t lane) {
  double t = (double)s * ((double)x + y) - (double)x / y + lane - s;
  double mag = fabs((double)s) * (fabs((double)x) + fabs((double)y)) + fabs((double)x / y) + lane +
               fabs((double)s) + 1.0;
  double e;
  switch (lane) {
    case 0: e = t + 1; break;
    case 1: e = x - t; mag += fabs((double)x); break;
    case 2: e = t * y; mag *= fabs((double)y); break;
    default: e = -t; break;
  }
  return fabs((double)got - e) <= 8 * 1.2e-7 * mag;
}

/* Random inputs of |n| elements of |t|'s kind into 4-byte words |a| and |b|
 * (b never 0); |s| the scalar. */
static void vec_inputs(const vtype_t* t, uint64_t* seed, uint32_t n, uint32_t* a, uint32_t* b,
                       uint32_t* s) {
  for (uint32_t k = 0; k < n; ++k) {
    if (t->kind == VK_FLOAT) {
      float x = frand(seed, -8.0f, 8.0f), y = frand(seed, 0.5f, 8.0f);
      if (cube_test_rand(seed) & 1) y = -y;
      memcpy(&a[k], &x, 4);
      memcpy(&b[k], &y, 4);
    } else if (t->kind == VK_INT) {
      int32_t x = (int32_t)(cube_test_rand(seed) % 2001) - 1000;
      int32_t y = (int32_t)(cube_test_rand(seed) % 2000) - 1000;
      if (y >= 0) ++y; /* [-1000, 1000] without 0 */
      memcpy(&a[k], &x, 4);
      memcpy(&b[k], &y, 4);
    } else {
      a[k] = (uint32_t)(cube_test_rand(seed) >> 32);
      b[k] = (uint32_t)(cube_test_rand(seed) >> 32) | 1u; /* wraps in the arithmetic */
    }
  }
  if (t->kind == VK_FLOAT) {
    float f = frand(seed, -3.0f, 3.0f);
    memcpy(s, &f, 4);
  } else if (t->kind == VK_INT) {
    *s = (uint32_t)((int32_t)(cube_test_rand(seed) % 101) - 50);
  } else {
    *s = (uint32_t)(cube_test_rand(seed) >> 32);
  }
}

static cube_arg_t scalar_arg(const vtype_t* t, uint32_t bits) {
  if (t->kind == VK_FLOAT) {
    float f;
    memcpy(&f, &bits, 4);
    return cube_arg_f32(f);
  }
  return t->kind == VK_INT ? cube_arg_i32((int32_t)bits) : cube_arg_u32(bits);
}

/* Checks one output element; prints the first few differences. */
static int vec_element_ok(const vtype_t* t, uint32_t got, uint32_t x, uint32_t y, uint32_t s,
                          uint32_t lane) {
  if (t->kind == VK_UINT) return got == host_u32(x, y, s, lane);
  if (t->kind == VK_INT) {
    int32_t g, xi, yi, si;
    memcpy(&g, &got, 4), memcpy(&xi, &x, 4), memcpy(&yi, &y, 4), memcpy(&si, &s, 4);
    return g == host_i32(xi, yi, si, lane);
  }
  float g, xf, yf, sf;
  memcpy(&g, &got, 4), memcpy(&xf, &x, 4), memcpy(&yf, &y, 4), memcpy(&sf, &s, 4);
  return host_f32_close(g, xf, yf, sf, lane);
}

/* vec_mix of type |name| for lengths with a tail, a length below one vector
 * and whole vectors; a and out are views one element into their buffers. */
static void vec_mix_case(const char* name) {
  CTS_CLIENT(c);
  const vtype_t* t = vtype_named(name);
  REQUIRE(t != NULL);
  const uint32_t dim = 32;
  cube_kernel_t* k = NULL;
  char src[2048];
  snprintf(src, sizeof src, k_vec_mix, t->elem);
  REQUIRE_OK(vk_create(src, "vec_mix", t, dim, &k));
  uint64_t seed = 0x7EC7000 + t->width * 16 + (uint64_t)t->kind;
  const uint32_t lengths[] = {1003, t->width - 1, 6 * t->width, 257};
  static const cube_execution_mode_t modes[3] = {CUBE_EXEC_CHECKED, CUBE_EXEC_VALIDATE,
                                                 CUBE_EXEC_UNCHECKED};
  for (size_t li = 0; li < sizeof(lengths) / sizeof(lengths[0]); ++li) {
    uint32_t n = lengths[li];
    uint32_t* a = malloc(((size_t)n + 1) * 4);
    uint32_t* b = malloc((size_t)n * 4 + 4);
    REQUIRE(a && b);
    uint32_t s;
    a[0] = 0xFFFFFFFFu;
    vec_inputs(t, &seed, n, a + 1, b, &s);
    cube_handle_t ha_whole, ha, hb;
    REQUIRE_OK(cube_client_create_from_slice(c, a, ((size_t)n + 1) * 4, &ha_whole));
    REQUIRE_OK(cube_handle_offset_view(ha_whole, 4, 0, &ha));
    REQUIRE_OK(cube_client_create_from_slice(c, b, (size_t)n * 4, &hb));
    uint32_t units = n / t->width + 1;
    for (int m = 0; m < 3; ++m) {
      cube_handle_t ho_whole, ho;
      REQUIRE_OK(cts_poisoned(c, ((size_t)n + 1) * 4, &ho_whole));
      REQUIRE_OK(cube_handle_offset_view(ho_whole, 4, 0, &ho));
      cube_arg_t args[4] = {cube_arg_buffer(ha), cube_arg_buffer(hb), cube_arg_buffer(ho),
                            scalar_arg(t, s)};
      REQUIRE_OK(cube_client_launch_mode(c, k, cube_count_static((units + dim - 1) / dim, 1, 1), 4,
                                         args, modes[m]));
      uint32_t* got = NULL;
      size_t size = 0;
      CHECK_OK(cts_read_alloc(c, ho_whole, (void**)&got, &size));
      CHECK_EQ_U64(size, ((uint64_t)n + 1) * 4);
      if (got && size == ((size_t)n + 1) * 4) {
        size_t bad = 0;
        uint32_t poison;
        memset(&poison, CTS_POISON, 4);
        if (got[0] != poison && bad++ < 5)
          fprintf(stderr, "%s n=%u mode %d: the element before the view was written\n", name, n,
                  m);
        for (uint32_t e = 0; e < n; ++e)
          if (!vec_element_ok(t, got[e + 1], a[e + 1], b[e], s, e % t->width) && bad++ < 5)
            fprintf(stderr, "%s n=%u mode %d: out[%u] = 0x%08x (inputs 0x%08x 0x%08x s 0x%08x)\n",
                    name, n, m, e, got[e + 1], a[e + 1], b[e], s);
        CHECK(bad == 0);
      }
      free(got);
      cube_handle_release(ho);
      cube_handle_release(ho_whole);
    }
    CHECK_OK(cube_client_sync(c));
    cube_handle_release(ha);
    cube_handle_release(ha_whole);
    cube_handle_release(hb);
    free(a);
    free(b);
  }
  cube_kernel_release(k);
  CTS_END(c);
}

CUBE_TEST(dialect_vector_float2) { vec_mix_case("float2"); }
CUBE_TEST(dialect_vector_float4) { vec_mix_case("float4"); }
CUBE_TEST(dialect_vector_int2) { vec_mix_case("int2"); }
CUBE_TEST(dialect_vector_int4) { vec_mix_case("int4"); }
CUBE_TEST(dialect_vector_uint2) { vec_mix_case("uint2"); }
CUBE_TEST(dialect_vector_uint4) { vec_mix_case("uint4"); }

//===----------------------------------------------------------------------===//
// Bounds of a whole vector
//===----------------------------------------------------------------------===//

/* out vector i = a vector i + 1 for i <= last. */
static const char* k_vec_copy =
    "CUBE_KERNEL(vec_copy, CUBE_ARRAY(const E, a), CUBE_ARRAY(E, out), uint32_t last) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i <= last) CUBE_VSTORE(V, out, i, CUBE_VLOAD(V, a, i) + (E)1);\n"
    "}\n";

static uint64_t message_index(const char* msg) {
  const char* at = msg ? strstr(msg, "at index ") : NULL;
  if (!at) return UINT64_MAX;
  return strtoull(at + strlen("at index "), NULL, 10);
}

/* Five whole vectors and a part of a sixth (|short_len| elements) against
 * six whole vectors: vector 5 is out of bounds, its last element
 * 5 * W + W - 1 is the index reported. |short_is_out| says which of a / out
 * is the short one. Checked: the load gives zeros, the store is dropped as a
 * whole; Validate: the same and the launch fails naming the index. */
static void vec_bounds(cube_client_t* c, const vtype_t* t, bool short_is_out,
                       cube_execution_mode_t mode, uint64_t* seed) {
  const uint32_t w = t->width, full = 6 * w, part = 5 * w + w / 2;
  const uint32_t na = short_is_out ? full : part, no = short_is_out ? part : full;
  const uint32_t guard = 3; /* elements after out's view */
  cube_kernel_t* k = NULL;
  REQUIRE_OK(vk_create(k_vec_copy, "vec_copy", t, 8, &k));
  uint32_t a[24], b[24];
  uint32_t s;
  vec_inputs(t, seed, na, a, b, &s);
  cube_handle_t ha, ho_whole, ho;
  REQUIRE_OK(cube_client_create_from_slice(c, a, (size_t)na * 4, &ha));
  REQUIRE_OK(cts_poisoned(c, ((size_t)no + guard) * 4, &ho_whole));
  REQUIRE_OK(cube_handle_offset_view(ho_whole, 0, (uint64_t)guard * 4, &ho));
  cube_arg_t args[3] = {cube_arg_buffer(ha), cube_arg_buffer(ho), cube_arg_u32(5)};
  CHECK_OK(cube_client_launch_mode(c, k, cube_count_static(1, 1, 1), 3, args, mode));
  cube_status_t st = cube_client_sync(c);
  const char* what = short_is_out ? "write" : "read";
  if (mode == CUBE_EXEC_VALIDATE) {
    CHECK_EQ_U64(cube_status_code(st), CUBE_STATUS_LAUNCH_FAILED);
    const char* msg = cube_status_message(st);
    uint64_t idx = message_index(msg);
    if (!cts_contains(msg, "vec_copy", short_is_out ? "'out'" : "'a'", what, NULL) ||
        idx != 5u * w + w - 1) {
      fprintf(stderr, "%s %s: expected index %u: %s\n", t->name, what, 5 * w + w - 1, msg);
      CHECK(!"the bounds error names the kernel, the array, the access and the last element");
    }
    cube_status_free(st);
    CHECK_OK(cube_client_accept_contents(c, ho_whole));
  } else {
    CHECK_OK(st);
  }
  uint32_t* got = NULL;
  size_t size = 0;
  CHECK_OK(cts_read_alloc(c, ho_whole, (void**)&got, &size));
  if (got && size == ((size_t)no + guard) * 4) {
    uint32_t poison;
    memset(&poison, CTS_POISON, 4);
    size_t bad = 0;
    for (uint32_t e = 0; e < no + guard; ++e) {
      uint32_t expect;
      if (e >= no || e >= 6 * w || (short_is_out && e >= 5 * w)) {
        expect = poison; /* past the view, or in the dropped partial vector */
      } else if (e >= na || (!short_is_out && e >= 5 * w)) {
        /* The out-of-bounds load gave zeros: 0 + 1. */
        if (t->kind == VK_FLOAT) {
          float one = 1.0f;
          memcpy(&expect, &one, 4);
        } else {
          expect = 1;
        }
      } else if (t->kind == VK_FLOAT) {
        float x;
        memcpy(&x, &a[e], 4);
        x += 1.0f;
        memcpy(&expect, &x, 4);
      } else {
        expect = a[e] + 1u;
      }
      if (got[e] != expect && bad++ < 5)
        fprintf(stderr, "%s %s mode %d: out[%u] = 0x%08x, expected 0x%08x\n", t->name, what,
                (int)mode, e, got[e], expect);
    }
    CHECK(bad == 0);
  } else {
    CHECK(!"read the output");
  }
  free(got);
  cube_handle_release(ho);
  cube_handle_release(ho_whole);
  cube_handle_release(ha);
  cube_kernel_release(k);
}

CUBE_TEST(dialect_vector_bounds_per_vector) {
  CTS_CLIENT(c);
  uint64_t seed = 0xB0B5;
  for (size_t i = 0; i < sizeof(k_vtypes) / sizeof(k_vtypes[0]); ++i)
    for (int out_short = 0; out_short < 2; ++out_short) {
      vec_bounds(c, &k_vtypes[i], out_short != 0, CUBE_EXEC_CHECKED, &seed);
      vec_bounds(c, &k_vtypes[i], out_short != 0, CUBE_EXEC_VALIDATE, &seed);
    }
  CTS_END(c);
}

//===----------------------------------------------------------------------===//
// The width from cube_client_io_optimized_vector_sizes
//===----------------------------------------------------------------------===//

/* y = 2 x + 1 with floats W at a time (W a define: 4, 2 or 1), the tail by
 * the unit after the last vector. */
static const char* k_vec_width =
    "CUBE_KERNEL(vec_width, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS, nv = CUBE_LEN(y) / W;\n"
    "#if W > 1\n"
    "  if (i < nv) CUBE_VSTORE(CUBE_VEC(float, W), y, i,\n"
    "                          2.0f * CUBE_VLOAD(CUBE_VEC(float, W), x, i) + 1.0f);\n"
    "#else\n"
    "  if (i < nv) CUBE_STORE(y, i, 2.0f * CUBE_LOAD(x, i) + 1.0f);\n"
    "#endif\n"
    "  if (i == nv)\n"
    "    for (uint64_t k = nv * W; k < CUBE_LEN(y); ++k) CUBE_STORE(y, k, 2.0f * CUBE_LOAD(x, k) + 1.0f);\n"
    "}\n";

CUBE_TEST(dialect_vector_width_from_io_optimized_sizes) {
  CTS_CLIENT(c);
  uint32_t sizes[16];
  size_t count = 0;
  REQUIRE_OK(cube_client_io_optimized_vector_sizes(c, 4, sizes, 16, &count));
  REQUIRE(count >= 1);
  /* The largest size the dialect has a vector of (4 or 2), else 1. */
  uint32_t w = 1;
  for (size_t i = 0; i < count; ++i)
    if ((sizes[i] == 4 || sizes[i] == 2) && sizes[i] > w) w = sizes[i];
  CHECK(w <= sizes[0]);
  char ws[16];
  snprintf(ws, sizeof ws, "%u", w);
  cube_define_t def = {"W", ws};
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.cube_dim = (cube_dim_t){64, 1, 1};
  d.source = k_vec_width;
  d.entry = "vec_width";
  d.defines = &def;
  d.define_count = 1;
  cube_kernel_t* k = NULL;
  REQUIRE_OK(cube_kernel_create(&d, &k));
  const uint32_t n = 4099;
  float* x = malloc(n * 4);
  float* e = malloc(n * 4);
  REQUIRE(x && e);
  uint64_t seed = 0x10F7;
  for (uint32_t i = 0; i < n; ++i) {
    x[i] = frand(&seed, -100.0f, 100.0f);
    e[i] = 2.0f * x[i] + 1.0f; /* exact in either rounding: 2x is exact */
  }
  cube_handle_t hx, hy;
  REQUIRE_OK(cube_client_create_from_slice(c, x, n * 4, &hx));
  REQUIRE_OK(cts_poisoned(c, n * 4, &hy));
  uint32_t units = n / w + 1;
  cube_arg_t args[2] = {cube_arg_buffer(hx), cube_arg_buffer(hy)};
  REQUIRE_OK(cube_client_launch(c, k, cube_count_static((units + 63) / 64, 1, 1), 2, args));
  CHECK(cts_read_equals(c, hy, e, n * 4));
  CHECK_OK(cube_client_sync(c));
  fprintf(stderr, "%s: io_optimized_vector_sizes(4) starts at %u; the kernel used width %u\n",
          cts_backend()->name, sizes[0], w);
  cube_handle_release(hx);
  cube_handle_release(hy);
  cube_kernel_release(k);
  free(x);
  free(e);
  CTS_END(c);
}

//===----------------------------------------------------------------------===//
// The example of docs/dialect.md, "Vector types"
//===----------------------------------------------------------------------===//

static const char* k_scale4 =
    "CUBE_KERNEL(scale4, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), float a)\n"
    "{\n"
    "    uint64_t i = ABSOLUTE_POS, nv = CUBE_LEN(y) / 4;   /* whole vectors */\n"
    "    if (i < nv) {\n"
    "        float4 v = CUBE_VLOAD(float4, x, i) * a;\n"
    "        v.w = -v.w;\n"
    "        CUBE_VSTORE(float4, y, i, v);\n"
    "    } else if (i == nv) {                               /* one unit does the tail */\n"
    "        for (uint64_t k = nv * 4; k < CUBE_LEN(y); ++k)\n"
    "            CUBE_STORE(y, k, (k % 4 == 3 ? -a : a) * CUBE_LOAD(x, k));\n"
    "    }\n"
    "}\n";

CUBE_TEST(dialect_vector_docs_example) {
  CTS_CLIENT(c);
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.cube_dim = (cube_dim_t){64, 1, 1};
  d.source = k_scale4;
  d.entry = "scale4";
  cube_kernel_t* k = NULL;
  REQUIRE_OK(cube_kernel_create(&d, &k));
  uint64_t seed = 0x5CA1E4;
  const uint32_t lengths[] = {1003, 1004, 2, 7};
  for (size_t li = 0; li < sizeof(lengths) / sizeof(lengths[0]); ++li) {
    uint32_t n = lengths[li];
    float* x = malloc((size_t)n * 4);
    float* e = malloc((size_t)n * 4);
    REQUIRE(x && e);
    float a = frand(&seed, -4.0f, 4.0f);
    for (uint32_t i = 0; i < n; ++i) {
      x[i] = frand(&seed, -100.0f, 100.0f);
      e[i] = (i % 4 == 3 ? -a : a) * x[i]; /* one rounding either way: bit for bit */
    }
    cube_handle_t hx, hy;
    REQUIRE_OK(cube_client_create_from_slice(c, x, (size_t)n * 4, &hx));
    REQUIRE_OK(cts_poisoned(c, (size_t)n * 4, &hy));
    uint32_t units = n / 4 + 1;
    cube_arg_t args[3] = {cube_arg_buffer(hx), cube_arg_buffer(hy), cube_arg_f32(a)};
    REQUIRE_OK(cube_client_launch(c, k, cube_count_static((units + 63) / 64, 1, 1), 3, args));
    CHECK(cts_read_equals(c, hy, e, (size_t)n * 4));
    cube_handle_release(hx);
    cube_handle_release(hy);
    free(x);
    free(e);
  }
  CHECK_OK(cube_client_sync(c));
  cube_kernel_release(k);
  CTS_END(c);
}

//===----------------------------------------------------------------------===//
// Vectors in cube-local memory and across barriers
//===----------------------------------------------------------------------===//

/* Each unit loads vector g of x into a float4 local and a CUBE_SHARED array
 * of float4; after the barrier it adds its neighbour's (unit + 1, wrapping in
 * the cube) to its own local, which lives across the barrier. */
static const char* k_vec_shared =
    "CUBE_KERNEL(vec_shared, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y)) {\n"
    "  CUBE_SHARED(float4, sh, 64);\n"
    "  uint32_t u = UNIT_POS;\n"
    "  uint64_t g = ABSOLUTE_POS;\n"
    "  float4 mine = CUBE_VLOAD(float4, x, g);\n"
    "  sh[u] = mine;\n"
    "  sync_cube();\n"
    "  float4 next = sh[(u + 1u) % CUBE_DIM];\n"
    "  mine.x = mine.x + next.w;\n"
    "  CUBE_VSTORE(float4, y, g, mine * 2.0f + next);\n"
    "}\n";

CUBE_TEST(dialect_vector_shared_and_barrier) {
  CTS_CLIENT(c);
  const uint32_t dim = 48, cubes = 5, nv = dim * cubes, n = nv * 4;
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.cube_dim = (cube_dim_t){dim, 1, 1};
  d.source = k_vec_shared;
  d.entry = "vec_shared";
  cube_kernel_t* k = NULL;
  REQUIRE_OK(cube_kernel_create(&d, &k));
  float* x = malloc((size_t)n * 4);
  float* e = malloc((size_t)n * 4);
  REQUIRE(x && e);
  uint64_t seed = 0x5A4ED;
  /* Small integers: every sum and product is exact. */
  for (uint32_t i = 0; i < n; ++i) x[i] = (float)((int)(cube_test_rand(&seed) % 201) - 100);
  for (uint32_t g = 0; g < nv; ++g) {
    uint32_t cube = g / dim, u = g % dim;
    const float* m = x + 4 * (size_t)g;
    const float* nx = x + 4 * ((size_t)cube * dim + (u + 1) % dim);
    for (int l = 0; l < 4; ++l) {
      float mine = m[l] + (l == 0 ? nx[3] : 0.0f);
      e[4 * (size_t)g + l] = mine * 2.0f + nx[l];
    }
  }
  cube_handle_t hx, hy;
  REQUIRE_OK(cube_client_create_from_slice(c, x, (size_t)n * 4, &hx));
  REQUIRE_OK(cts_poisoned(c, (size_t)n * 4, &hy));
  cube_arg_t args[2] = {cube_arg_buffer(hx), cube_arg_buffer(hy)};
  static const cube_execution_mode_t modes[3] = {CUBE_EXEC_CHECKED, CUBE_EXEC_VALIDATE,
                                                 CUBE_EXEC_UNCHECKED};
  for (int m = 0; m < 3; ++m) {
    REQUIRE_OK(cube_client_launch_mode(c, k, cube_count_static(cubes, 1, 1), 2, args, modes[m]));
    CHECK(cts_read_equals(c, hy, e, (size_t)n * 4));
  }
  CHECK_OK(cube_client_sync(c));
  cube_handle_release(hx);
  cube_handle_release(hy);
  cube_kernel_release(k);
  free(x);
  free(e);
  CTS_END(c);
}
