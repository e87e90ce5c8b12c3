/* bench_alloc_churn: how much memory cube's pools hold against what is in
 * use (issue 17 part 6, docs/observability.md "Memory that is not wasted").
 *
 *   bench_alloc_churn [OPS [LIVE_MAX...]]   (defaults: 20000 ops, LIVE_MAX 50 200 1000)
 *   bench_alloc_churn --no-step ...         (leaves the transformer step out)
 *   bench_alloc_churn --replay=FILE ...     (also replays a recorded trace)
 *
 * The churn trace is the one bench/peers/torch_alloc_churn.py defines in its
 * docstring (the PyTorch peer): LIVE_MAX slots; each step picks a slot with
 * a xorshift64 generator (seed 88172645463325252; x ^= x << 13; x ^= x >> 7;
 * x ^= x << 17) and frees its buffer if it holds one, else allocates
 * size = exp(log(4 KiB) + (log(64 MiB) - log(4 KiB)) * (next() % 1000000) / 1e6)
 * bytes (truncated to an integer, as Python's int()). Every 100 steps it
 * samples the bytes in use and the bytes reserved; it prints the peak of
 * each, reserved/peak (peak reserved / peak in use: the figure PyTorch's
 * script prints) and the mean of reserved/in-use over the samples. The
 * first sizes are printed so that a reader can compare them with the
 * Python's.
 *
 * Then a transformer-like training step (see step_trace below) replayed the
 * same way: three steps of a small GPT (6 layers, batch 8, sequence 256,
 * width 512, vocabulary 8192) whose tensors live as PyTorch's autograd keeps
 * them: weights and optimizer state for the whole run, activations from the
 * forward pass until backward reaches their layer, gradients until the
 * optimizer step, temporaries for one operation.
 *
 * --replay=FILE replays a trace recorded from a real program: lines "a SLOT
 * SIZE" (allocate) and "f SLOT" (release) after '#' comments, as
 * bench/peers/torch_record_alloc_trace.py writes from PyTorch's allocator
 * history (bench/data/torch_transformer_train.trace: training steps of a
 * transformer language model on the H200). Its row is "recorded: FILE".
 *
 * The device is CUBE_BACKEND's device 0 (cpu by default; opencl; cuda, or
 * cuda over the mock driver with CUBE_CUDA_DRIVER=.../libcube_mock_cuda.so).
 * In use and reserved are cube_client_memory_usage's bytes_in_use and
 * bytes_reserved (what the pools hold from the backend) of the stream the
 * trace allocates on. Each row starts from an explicit cleanup, so rows do
 * not inherit each other's pages. Every row runs twice, each time in a
 * process of its own: on a server with memory_config SUBSLICES (CubeCL's
 * page ladder, cube's default before issue 17) and with FITTED (the
 * default); --config=NAME runs one (fitted, subslices or exclusive).
 * Exit status 1 when a call failed.
 */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BENCH_NAME "bench_alloc_churn"
#include "bench_common.h"
#include "cube/cube.h"

#define MIB (1024.0 * 1024.0)

/* One operation of a trace: allocate |size| bytes into |slot|, or (size 0)
 * release the buffer in |slot|. */
typedef struct op {
  uint32_t slot;
  uint64_t size;
} op_t;

typedef struct trace {
  op_t* ops;
  size_t count, cap;
  uint32_t slots;
} trace_t;

static void trace_push(trace_t* t, uint32_t slot, uint64_t size) {
  if (t->count == t->cap) {
    t->cap = t->cap ? t->cap * 2 : 1024;
    op_t* ops = realloc(t->ops, t->cap * sizeof(*ops));
    if (!ops) {
      fprintf(stderr, BENCH_NAME ": out of host memory\n");
      exit(1);
    }
    t->ops = ops;
  }
  t->ops[t->count++] = (op_t){slot, size};
  if (slot + 1 > t->slots) t->slots = slot + 1;
}

/* A recorded trace (see the top): 0 when it was read whole. */
static int read_trace(const char* path, trace_t* t) {
  FILE* f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, BENCH_NAME ": cannot open %s\n", path);
    return 1;
  }
  char line[256];
  unsigned long long slot, size;
  int bad = 0;
  unsigned lineno = 0;
  while (!bad && fgets(line, sizeof(line), f)) {
    ++lineno;
    if (line[0] == '#' || line[0] == '\n') continue;
    if (sscanf(line, "a %llu %llu", &slot, &size) == 2 && size > 0 && slot < (1u << 24))
      trace_push(t, (uint32_t)slot, size);
    else if (sscanf(line, "f %llu", &slot) == 1 && slot < (1u << 24))
      trace_push(t, (uint32_t)slot, 0);
    else
      bad = 1;
  }
  fclose(f);
  if (bad || t->count == 0) {
    fprintf(stderr, BENCH_NAME ": %s: line %u is not \"a SLOT SIZE\" or \"f SLOT\"\n", path, lineno);
    return 1;
  }
  return 0;
}

/* The churn trace of torch_alloc_churn.py. Slots that hold a buffer are
 * tracked here so that the op is a release exactly when the Python frees. */
static uint64_t g_state;
static uint64_t next_u64(void) {
  g_state ^= g_state << 13;
  g_state ^= g_state >> 7;
  g_state ^= g_state << 17;
  return g_state;
}

static void churn_trace(trace_t* t, uint64_t ops, uint32_t live_max, bool print_sizes) {
  g_state = 88172645463325252ull;
  const double lo = log(4096.0), hi = log(64.0 * 1024 * 1024);
  bool* held = calloc(live_max, sizeof(*held));
  if (!held) exit(1);
  int printed = 0;
  for (uint64_t i = 0; i < ops; ++i) {
    uint32_t k = (uint32_t)(next_u64() % live_max);
    if (held[k]) {
      held[k] = false;
      trace_push(t, k, 0);
    } else {
      uint64_t size = (uint64_t)exp(lo + (hi - lo) * (double)(next_u64() % 1000000) / 1e6);
      held[k] = true;
      trace_push(t, k, size);
      if (print_sizes && printed < 6) printf("%s%" PRIu64, printed++ ? " " : "  first sizes: ", size);
    }
  }
  if (print_sizes) printf("\n");
  t->slots = live_max;
  free(held);
}

/* A transformer-like training step (the tensors a small GPT's forward,
 * backward and AdamW step allocate, fp32, in PyTorch's order and lifetimes).
 * Slots: 0.. weights (+ Adam's two moments) for the whole run; then
 * per-step activations, gradients and temporaries, taken from a free list. */
typedef struct step_gen {
  trace_t* t;
  uint32_t* free_slots;
  uint32_t free_count, next_slot;
} step_gen_t;

static uint32_t sg_alloc(step_gen_t* g, uint64_t bytes) {
  uint32_t s = g->free_count ? g->free_slots[--g->free_count] : g->next_slot++;
  trace_push(g->t, s, bytes);
  return s;
}
static void sg_free(step_gen_t* g, uint32_t s) {
  trace_push(g->t, s, 0);
  g->free_slots[g->free_count++] = s;
}

enum { L = 6, B = 8, T = 256, D = 512, H = 8, V = 8192, STEPS = 3, MAXW = 16 };

static void step_trace(trace_t* t) {
  step_gen_t g = {t, calloc(1u << 16, sizeof(uint32_t)), 0, 0};
  if (!g.free_slots) exit(1);
  const uint64_t f = 4, btd = (uint64_t)B * T * D * f, bhtt = (uint64_t)B * H * T * T * f;
  /* Weights per layer: ln1, qkv, proj, ln2, fc, fc_proj; then embeddings, lm head. */
  uint64_t wsz[MAXW];
  int nw = 0;
  wsz[nw++] = 2 * D * f;
  wsz[nw++] = (uint64_t)D * 3 * D * f + 3 * D * f;
  wsz[nw++] = (uint64_t)D * D * f + D * f;
  wsz[nw++] = 2 * D * f;
  wsz[nw++] = (uint64_t)D * 4 * D * f + 4 * D * f;
  wsz[nw++] = (uint64_t)4 * D * D * f + D * f;
  uint32_t weights[L * 6 + 2], m1[L * 6 + 2], m2[L * 6 + 2];
  int total_w = 0;
  uint64_t all_w[L * 6 + 2];
  for (int l = 0; l < L; ++l)
    for (int i = 0; i < nw; ++i) all_w[total_w++] = wsz[i];
  all_w[total_w++] = (uint64_t)V * D * f; /* token embedding (tied lm head) */
  all_w[total_w++] = (uint64_t)T * D * f; /* position embedding */
  for (int i = 0; i < total_w; ++i) weights[i] = sg_alloc(&g, all_w[i]);
  for (int i = 0; i < total_w; ++i) m1[i] = sg_alloc(&g, all_w[i]);
  for (int i = 0; i < total_w; ++i) m2[i] = sg_alloc(&g, all_w[i]);
  for (int step = 0; step < STEPS; ++step) {
    /* Forward: the tokens, the embedding, then per layer the saved tensors. */
    uint32_t idx = sg_alloc(&g, (uint64_t)B * T * 8);
    uint32_t x = sg_alloc(&g, btd);
    uint32_t saved[L][10];
    for (int l = 0; l < L; ++l) {
      uint32_t* s = saved[l];
      s[0] = sg_alloc(&g, btd);                         /* ln1 out */
      s[1] = sg_alloc(&g, 3 * btd);                     /* qkv */
      uint32_t scores = sg_alloc(&g, bhtt);             /* q k^T */
      s[2] = sg_alloc(&g, bhtt);                        /* softmax */
      sg_free(&g, scores);
      s[3] = sg_alloc(&g, btd);                         /* attention out */
      uint32_t proj = sg_alloc(&g, btd);
      s[4] = sg_alloc(&g, btd);                         /* residual 1 */
      sg_free(&g, proj);
      s[5] = sg_alloc(&g, btd);                         /* ln2 out */
      s[6] = sg_alloc(&g, 4 * btd);                     /* fc */
      s[7] = sg_alloc(&g, 4 * btd);                     /* gelu */
      uint32_t fcp = sg_alloc(&g, btd);
      s[8] = sg_alloc(&g, btd);                         /* residual 2 */
      sg_free(&g, fcp);
      s[9] = x;
      x = s[8];
    }
    uint32_t lnf = sg_alloc(&g, btd);
    uint32_t logits = sg_alloc(&g, (uint64_t)B * T * V * f);
    uint32_t probs = sg_alloc(&g, (uint64_t)B * T * V * f); /* log-softmax */
    uint32_t loss = sg_alloc(&g, 4);
    /* Backward. */
    uint32_t dlogits = sg_alloc(&g, (uint64_t)B * T * V * f);
    sg_free(&g, probs);
    sg_free(&g, logits);
    uint32_t grads[L * 6 + 2];
    grads[total_w - 2] = sg_alloc(&g, all_w[total_w - 2]);
    uint32_t dx = sg_alloc(&g, btd);
    sg_free(&g, dlogits);
    sg_free(&g, lnf);
    for (int l = L - 1; l >= 0; --l) {
      uint32_t* s = saved[l];
      for (int i = nw - 1; i >= 0; --i) grads[l * nw + i] = sg_alloc(&g, wsz[i]);
      uint32_t dg = sg_alloc(&g, 4 * btd);
      sg_free(&g, s[7]);
      uint32_t dfc = sg_alloc(&g, 4 * btd);
      sg_free(&g, dg);
      sg_free(&g, s[6]);
      uint32_t dln2 = sg_alloc(&g, btd);
      sg_free(&g, dfc);
      sg_free(&g, s[5]);
      uint32_t dres = sg_alloc(&g, btd);
      sg_free(&g, dln2);
      sg_free(&g, s[8]);
      sg_free(&g, s[4]);
      uint32_t dattn = sg_alloc(&g, btd);
      uint32_t dsoft = sg_alloc(&g, bhtt);
      uint32_t dscores = sg_alloc(&g, bhtt);
      sg_free(&g, dsoft);
      sg_free(&g, s[2]);
      sg_free(&g, s[3]);
      uint32_t dqkv = sg_alloc(&g, 3 * btd);
      sg_free(&g, dscores);
      sg_free(&g, dattn);
      sg_free(&g, s[1]);
      uint32_t dln1 = sg_alloc(&g, btd);
      sg_free(&g, dqkv);
      sg_free(&g, s[0]);
      uint32_t dnext = sg_alloc(&g, btd);
      sg_free(&g, dln1);
      sg_free(&g, dres);
      sg_free(&g, dx);
      if (l > 0) {
        /* s[9] is the previous layer's s[8], freed with that layer. */
      } else {
        sg_free(&g, s[9]);
      }
      dx = dnext;
    }
    grads[total_w - 1] = sg_alloc(&g, all_w[total_w - 1]);
    sg_free(&g, dx);
    sg_free(&g, idx);
    sg_free(&g, loss);
    /* AdamW: per weight two temporaries, then the gradient goes (set_to_none). */
    for (int i = 0; i < total_w; ++i) {
      uint32_t a = sg_alloc(&g, all_w[i]);
      uint32_t b = sg_alloc(&g, all_w[i]);
      sg_free(&g, a);
      sg_free(&g, b);
    }
    for (int i = 0; i < total_w; ++i) sg_free(&g, grads[i]);
  }
  for (int i = 0; i < total_w; ++i) {
    sg_free(&g, weights[i]);
    sg_free(&g, m1[i]);
    sg_free(&g, m2[i]);
  }
  free(g.free_slots);
}

typedef struct figures {
  uint64_t peak_in, peak_res, samples, allocs, final_res;
  double ratio_sum;
} figures_t;

static void sample(cube_client_t* c, figures_t* fg) {
  cube_memory_usage_t u;
  cube_status_t s = cube_client_memory_usage(c, &u);
  if (s) {
    fail_status("cube_client_memory_usage", s);
    return;
  }
  if (u.bytes_in_use > fg->peak_in) fg->peak_in = u.bytes_in_use;
  if (u.bytes_reserved > fg->peak_res) fg->peak_res = u.bytes_reserved;
  if (u.bytes_in_use) {
    fg->ratio_sum += (double)u.bytes_reserved / (double)u.bytes_in_use;
    fg->samples++;
  }
}

/* Replays |t|, sampling every |every| ops (100 as the Python; a recorded
 * trace every op, as PyTorch's own peaks are exact). */
static figures_t replay(cube_client_t* c, const trace_t* t, size_t every) {
  figures_t fg = {0};
  cube_handle_t* h = calloc(t->slots, sizeof(*h));
  if (!h) exit(1);
  for (size_t i = 0; i < t->count; ++i) {
    const op_t* o = &t->ops[i];
    if (o->size == 0) {
      cube_handle_release(h[o->slot]);
      h[o->slot] = (cube_handle_t){0};
    } else {
      cube_status_t s = cube_client_empty(c, (size_t)o->size, &h[o->slot]);
      if (s) {
        fail_status("cube_client_empty", s);
        break;
      }
      fg.allocs++;
    }
    if (i % every == 0) sample(c, &fg);
  }
  for (uint32_t k = 0; k < t->slots; ++k) cube_handle_release(h[k]);
  free(h);
  cube_memory_usage_t u;
  cube_status_t s = cube_client_memory_usage(c, &u);
  if (s) fail_status("cube_client_memory_usage", s);
  else fg.final_res = u.bytes_reserved;
  TRY("cube_client_memory_cleanup", cube_client_memory_cleanup(c));
  return fg;
}

static void print_row(const char* name, const figures_t* fg) {
  printf("%-22s %10.1f %12.1f %14.2f %16.2f %14.1f\n", name, (double)fg->peak_in / MIB,
         (double)fg->peak_res / MIB,
         fg->peak_in ? (double)fg->peak_res / (double)fg->peak_in : 0.0,
         fg->samples ? fg->ratio_sum / (double)fg->samples : 0.0, (double)fg->final_res / MIB);
}

/* Runs every row on a fresh server of |config| (in its own process, so
 * that each configuration gets its own server). */
static int run_config(cube_memory_config_t config, const char* config_name, uint64_t ops,
                      const uint32_t* lives, int nl, bool with_step, const trace_t* recorded,
                      const char* recorded_name) {
  cube_device_id_t dev = {cube_backend_default(), 0};
  cube_server_options_t o;
  memset(&o, 0, sizeof(o));
  o.struct_size = sizeof(o);
  o.memory_config = config;
  cube_client_t* c = NULL;
  cube_status_t s = cube_client_init(dev, &o, &c);
  if (s) {
    fail_status("cube_client_init", s);
    return 1;
  }
  const cube_device_properties_t* props = cube_client_properties(c);
  printf("\n== memory_config %s on %s (backend %s)\n", config_name, props ? props->name : "?",
         cube_backend_name(dev.backend));
  printf("%-22s %10s %12s %14s %16s %14s\n", "trace", "peak MiB", "reserved MiB",
         "reserved/peak", "mean res/in-use", "after MiB");
  for (int i = 0; i < nl; ++i) {
    trace_t t = {0};
    churn_trace(&t, ops, lives[i], i == 0 && config == CUBE_MEMORY_CONFIG_FITTED);
    figures_t fg = replay(c, &t, 100);
    char name[64];
    snprintf(name, sizeof(name), "churn %" PRIu64 " live<=%u", ops, lives[i]);
    print_row(name, &fg);
    free(t.ops);
  }
  if (with_step) {
    trace_t t = {0};
    step_trace(&t);
    figures_t fg = replay(c, &t, 100);
    print_row("transformer step", &fg);
    free(t.ops);
  }
  if (recorded) {
    figures_t fg = replay(c, recorded, 1);
    char name[64];
    snprintf(name, sizeof(name), "recorded: %s", recorded_name);
    print_row(name, &fg);
  }
  fflush(stdout);
  cube_client_release(c);
  return g_failures ? 1 : 0;
}

int main(int argc, char** argv) {
  bool with_step = true;
  const char* only = NULL;
  const char* replay_path = NULL;
  int a = 1;
  for (; a < argc && strncmp(argv[a], "--", 2) == 0; ++a) {
    if (strcmp(argv[a], "--no-step") == 0) with_step = false;
    else if (strncmp(argv[a], "--config=", 9) == 0) only = argv[a] + 9;
    else if (strncmp(argv[a], "--replay=", 9) == 0) replay_path = argv[a] + 9;
    else {
      fprintf(stderr, "%s: unknown option %s\n", argv[0], argv[a]);
      return 2;
    }
  }
  uint64_t ops = a < argc ? strtoull(argv[a++], NULL, 10) : 20000;
  uint32_t lives[16];
  int nl = 0;
  for (; a < argc && nl < 16; ++a) lives[nl++] = (uint32_t)strtoul(argv[a], NULL, 10);
  if (nl == 0) {
    lives[nl++] = 50;
    lives[nl++] = 200;
    lives[nl++] = 1000;
  }
  for (int i = 0; i < nl; ++i) {
    if (lives[i] == 0 || ops == 0) {
      fprintf(stderr, "usage: %s [--no-step] [--config=fitted|subslices|exclusive] "
              "[--replay=FILE] [OPS [LIVE_MAX...]] (positive numbers)\n", argv[0]);
      return 2;
    }
  }
  trace_t recorded = {0};
  const char* recorded_name = NULL;
  if (replay_path) {
    if (read_trace(replay_path, &recorded)) return 2;
    recorded_name = strrchr(replay_path, '/') ? strrchr(replay_path, '/') + 1 : replay_path;
  }
  print_machine("bench_alloc_churn", cube_version());
  printf("in use and reserved: cube_client_memory_usage of the client's stream, sampled every "
         "100 ops; reserved/peak = peak reserved / peak in use; after: reserved once the row's "
         "buffers were released (before the cleanup between rows)\n");
  printf("transformer step: 3 training steps of a GPT of 6 layers, batch 8, sequence 256, width "
         "512, vocabulary 8192, fp32 (step_trace in this file)\n");
  static const struct {
    const char* name;
    cube_memory_config_t config;
  } configs[] = {{"subslices", CUBE_MEMORY_CONFIG_SUBSLICES},
                 {"fitted", CUBE_MEMORY_CONFIG_FITTED},
                 {"exclusive", CUBE_MEMORY_CONFIG_EXCLUSIVE_PAGES}};
  int rc = 0;
  for (size_t i = 0; i < sizeof(configs) / sizeof(configs[0]); ++i) {
    if (only ? strcmp(only, configs[i].name) != 0 : configs[i].config == CUBE_MEMORY_CONFIG_EXCLUSIVE_PAGES)
      continue;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
      perror("fork");
      return 1;
    }
    if (pid == 0)
      _exit(run_config(configs[i].config, configs[i].name, ops, lives, nl, with_step,
                       replay_path ? &recorded : NULL, recorded_name));
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
  }
  free(recorded.ops);
  return rc;
}
