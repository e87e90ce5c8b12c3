/* cube: the command-line tool.
 *   cube info [--json]   backends, devices, properties and features
 *   cube info --options [--json]
 *                        every option (CUBE_* variable): value and source
 *   cube cache           kernel cache: directory, entries, size and counters
 *   cube cache clear     remove every disk entry
 *   cube cache list      every entry: kernel, kind, backend, size, last use
 *   cube cache prune [--max SIZE]
 *                        remove corrupt, other-version and stale temporary
 *                        entries, then least recently used ones beyond SIZE
 *   cube bundle export FILE | import FILE | show FILE
 *                        the cache's compiled kernels and tuning results of
 *                        the default device in one file (cube/bundle.h)
 *   cube memory FILE     summary of a memory snapshot (cube_client_memory_snapshot):
 *                        totals, the ledger, largest holders by tag, pools
 *                        and their fragmentation, recent events
 *   cube demo            uploads tensors (contiguous and packed), runs kernels,
 *                        reads the results back and checks them, prints memory
 *                        usage and a profile. Exit status 0 only if every check
 *                        passed.
 *   cube --help | -h | help [<command>]    usage on stdout, exit 0
 *   cube --version                         the library version
 * A wrong command line (unknown command or option, extra argument) is named
 * on stderr with exit status 2.
 */
#include <cjson/cJSON.h>
#include <cube/cube.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

//===----------------------------------------------------------------------===//
// Command line
//===----------------------------------------------------------------------===//

static const char* usage_text =
    "usage: cube <command> [<options>]\n"
    "\n"
    "commands:\n"
    "  info [--json]  list backends, devices, properties and features\n"
    "                 (--json: the same as one JSON document)\n"
    "  info --options [--json]  list every option (CUBE_* variable) with its\n"
    "                 value and where it came from (default, environment, API)\n"
    "  cache          show the kernel cache (directory, entries, size, counters)\n"
    "  cache clear    remove every kernel cache entry on disk\n"
    "  cache list     list the entries: kernel, kind, backend, size, last use\n"
    "  cache prune [--max SIZE]  remove unusable entries, then the least\n"
    "                 recently used beyond SIZE (default CUBE_CACHE_MAX)\n"
    "  bundle export FILE  write the cache's kernels and tuning results for\n"
    "                 the default device into FILE\n"
    "  bundle import FILE  check FILE and add its entries to the cache\n"
    "  bundle show FILE    check FILE and describe it\n"
    "  memory FILE    summarise a memory snapshot: totals, ledger, largest\n"
    "                 holders by tag, fragmentation per pool\n"
    "  demo           run the demo on the default backend (CUBE_BACKEND, else cpu)\n"
    "  help [<command>]  this text, or the usage of one command\n"
    "\n"
    "options:\n"
    "  -h, --help     show usage (after a command: that command's usage)\n"
    "  --version      print the library version\n"
    "\n"
    "environment: CUBE_BACKEND (default backend), CUBE_CACHE_DIR (kernel cache\n"
    "directory, or off), CUBE_LOG_FILE (profile log); 'cube info --options' lists\n"
    "every option. A malformed value makes every command fail, naming it.\n";

typedef struct {
  const char* name;
  const char* usage; /* printed by `cube <name> --help` and `cube help <name>` */
} command_t;

static const command_t commands[] = {
    {"info",
     "usage: cube info [--options] [--json]\n"
     "  Lists every backend (available or not, and why not), the kernel cache\n"
     "  directory, the CPU backend's C compiler (its version, its flags, and\n"
     "  whether it vectorised the unit loop of a probe kernel, by its own report),\n"
     "  and for each device its properties and features.\n"
     "  --options  instead, list every option, one line each:\n"
     "               NAME=VALUE  (SOURCE)  scope, what is accepted\n"
     "             SOURCE is default, environment or API (cube_option_set); a\n"
     "             value the environment gave but that is not accepted shows the\n"
     "             default, marked 'environment value rejected', and the command\n"
     "             exits 1 after saying why on stderr\n"
     "  --json     print the same information as one JSON document on stdout\n"
     "  A malformed option (see --options) makes 'cube info' fail (exit 1).\n"},
    {"cache",
     "usage: cube cache [clear | list | prune [--max SIZE]]\n"
     "  Shows the kernel cache directory (and why it is unusable, if it is),\n"
     "  its entries on disk and this process's counters.\n"
     "  clear  remove every entry on disk\n"
     "  list   one line per entry, most recently used first: the kernel (or\n"
     "         tuned operation), kind, backend, size, last use, cube version;\n"
     "         an entry that cannot be read says why\n"
     "  prune  remove corrupt entries, entries of other cube versions and\n"
     "         temporary files older than an hour, then the least recently\n"
     "         used entries until the rest fit in SIZE (bytes, or with a\n"
     "         K/M/G/T suffix: powers of 1024); without --max, CUBE_CACHE_MAX\n"
     "         (0: no eviction)\n"},
    {"bundle",
     "usage: cube bundle export FILE | import FILE | show FILE\n"
     "  A bundle holds the kernel cache's compiled kernels and tuning results\n"
     "  made by this cube version for one device, checksummed\n"
     "  (docs/autotune.md, \"Bundles\"). The device is device 0 of the default\n"
     "  backend (CUBE_BACKEND, else cpu).\n"
     "  export FILE  write them into FILE (replaced atomically, mode 0600)\n"
     "  import FILE  check FILE (owner and mode, format, checksum, cube version,\n"
     "               device) and store its entries into the cache directory,\n"
     "               all or none; a refusal says why (exit 1)\n"
     "  show FILE    check FILE and print its version, device and entries\n"},
    {"memory",
     "usage: cube memory FILE\n"
     "  Reads a memory snapshot (cube_client_memory_snapshot;\n"
     "  docs/observability.md) and prints its device, the totals, the ledger\n"
     "  (with the unaccounted remainder), the largest holders by tag, every pool\n"
     "  that holds pages with its fragmentation (1 - largest free block / free\n"
     "  bytes), and a count of the recent events. Exit 1 when FILE cannot be\n"
     "  read or is not a snapshot.\n"},
    {"demo",
     "usage: cube demo\n"
     "  Runs the demo on the default backend (CUBE_BACKEND, else cpu): uploads\n"
     "  tensors, runs dialect and native kernels, reads the results back and\n"
     "  checks them, prints memory usage and a profile. Exit status 0 only if\n"
     "  every check passed.\n"},
    {"help",
     "usage: cube help [<command>]\n"
     "  Prints the usage of cube, or of one command.\n"},
};
#define COMMAND_COUNT (sizeof(commands) / sizeof(commands[0]))

static const command_t* find_command(const char* name) {
  for (size_t i = 0; i < COMMAND_COUNT; ++i)
    if (strcmp(commands[i].name, name) == 0) return &commands[i];
  return NULL;
}

static bool is_help(const char* a) { return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0; }

/* A wrong command line: named on stderr, exit status 2. */
static int usage_error(const char* cmd, const char* fmt, const char* what) {
  fprintf(stderr, "cube%s%s: ", cmd ? " " : "", cmd ? cmd : "");
  fprintf(stderr, fmt, what);
  fprintf(stderr, " (see 'cube %s%s--help')\n", cmd ? cmd : "", cmd ? " " : "");
  return 2;
}

/* Checks the arguments of command |cmd| (argv[0] is the first one after the
 * command name): each must be one of |accepted| (NULL-terminated, options
 * and words alike), at most once. Sets *help when --help/-h was given (the
 * command then prints its usage and does nothing else). Returns 0, or 2
 * after naming the first wrong argument. */
static int check_args(const command_t* cmd, int argc, char** argv, const char* const* accepted,
                      bool* seen, bool* help) {
  *help = false;
  for (int i = 0; i < argc; ++i) {
    const char* a = argv[i];
    if (is_help(a)) {
      *help = true;
      continue;
    }
    size_t k = 0;
    while (accepted && accepted[k] && strcmp(accepted[k], a) != 0) ++k;
    if (!accepted || !accepted[k]) {
      if (a[0] == '-' && a[1] != '\0') return usage_error(cmd->name, "unknown option '%s'", a);
      return usage_error(cmd->name, "unexpected argument '%s'", a);
    }
    if (seen[k]) return usage_error(cmd->name, "'%s' given twice", a);
    seen[k] = true;
  }
  return 0;
}

static const char* fmt_bytes(uint64_t b, char* buf, size_t n) {
  const char* u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)b;
  int i = 0;
  while (v >= 1024 && i < 4) v /= 1024, ++i;
  snprintf(buf, n, i ? "%.2f %s" : "%.0f %s", v, u[i]);
  return buf;
}

//===----------------------------------------------------------------------===//
// info
//===----------------------------------------------------------------------===//

static const struct {
  uint64_t bit;
  const char* name;
} feature_names[] = {{CUBE_FEATURE_F16, "f16"},
                     {CUBE_FEATURE_BF16, "bf16"},
                     {CUBE_FEATURE_F64, "f64"},
                     {CUBE_FEATURE_I64, "i64"},
                     {CUBE_FEATURE_ATOMIC_U32, "atomic-u32"},
                     {CUBE_FEATURE_ATOMIC_F32_ADD, "atomic-f32-add"},
                     {CUBE_FEATURE_PLANE, "plane"},
                     {CUBE_FEATURE_SYNC_CUBE, "sync-cube"},
                     {CUBE_FEATURE_SHARED_MEMORY, "shared-memory"},
                     {CUBE_FEATURE_NATIVE_KERNELS, "native-kernels"},
                     {CUBE_FEATURE_DYNAMIC_COUNT, "dynamic-count"},
                     {CUBE_FEATURE_COLLECTIVES, "collectives"},
                     {CUBE_FEATURE_PINNED_STAGING, "pinned-staging"}};
#define FEATURE_COUNT (sizeof(feature_names) / sizeof(feature_names[0]))

/* A JSON string: quotes, backslashes and control characters escaped; bytes
 * that are not UTF-8 (a path or a driver's message may hold any) become
 * U+FFFD, so that the document is valid whatever the strings held. NULL is
 * null. */
static void json_string(const char* s) {
  if (!s) {
    fputs("null", stdout);
    return;
  }
  const unsigned char* p = (const unsigned char*)s;
  putchar('"');
  while (*p) {
    unsigned char c = *p;
    if (c == '"' || c == '\\') {
      putchar('\\');
      putchar(c);
      ++p;
    } else if (c < 0x20) {
      switch (c) {
        case '\n': fputs("\\n", stdout); break;
        case '\t': fputs("\\t", stdout); break;
        case '\r': fputs("\\r", stdout); break;
        default: printf("\\u%04x", c); break;
      }
      ++p;
    } else if (c < 0x80) {
      putchar(c);
      ++p;
    } else {
      /* The length of a well-formed sequence starting here, else 0. */
      size_t n = 0;
      uint32_t cp = 0;
      if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F;
      else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F;
      else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07;
      for (size_t k = 1; k < n; ++k) {
        if ((p[k] & 0xC0) != 0x80) {
          n = 0;
          break;
        }
        cp = (cp << 6) | (p[k] & 0x3F);
      }
      /* Overlong forms, surrogates and code points past U+10FFFF. */
      if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
          (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        n = 0;
      if (n == 0) {
        fputs("\\ufffd", stdout);
        ++p;
      } else {
        fwrite(p, 1, n, stdout);
        p += n;
      }
    }
  }
  putchar('"');
}

static void json_key(const char* key) {
  json_string(key);
  putchar(':');
}

/* The kernel cache: directory ("" when off) and, when unusable, why. The
 * status is the caller's to free. */
static const char* cache_dir_and_status(cube_status_t* out_status) {
  *out_status = cube_kernel_cache_dir_status();
  return cube_kernel_cache_dir();
}

static void info_device_text(cube_client_t* c, cube_backend_t b, size_t i) {
  const cube_device_properties_t* p = cube_client_properties(c);
  const cube_backend_info_t* info = cube_client_info(c);
  char a[32], m[32];
  printf("  device %s:%zu  %s\n", cube_backend_name(b), i, p->name);
  printf("    runtime: %s; queue: %s\n", info->version,
         cube_client_is_blocking(c) ? "inline" : "threaded");
  printf("    memory: %s total, largest allocation %s, alignment %" PRIu64 " B\n",
         fmt_bytes(p->memory.total_memory, a, sizeof(a)),
         fmt_bytes(p->memory.max_page_size, m, sizeof(m)), p->memory.alignment);
  if (p->hardware.num_streaming_multiprocessors)
    printf("    multiprocessors: %u; compute capability %u.%u; ",
           p->hardware.num_streaming_multiprocessors, p->hardware.compute_capability / 10,
           p->hardware.compute_capability % 10);
  else
    printf("    cores: %u; ", p->hardware.num_cpu_cores);
  if (p->hardware.l2_cache_size)
    printf("L2 %s; ", fmt_bytes(p->hardware.l2_cache_size, a, sizeof(a)));
  printf("load width %u bits; plane %u..%u; max vector %u\n", p->hardware.load_width,
         p->hardware.plane_size_min, p->hardware.plane_size_max, p->hardware.max_vector_size);
  printf("    cube dim max (%u, %u, %u), %u units; cube count max (%u, %u, %u)\n",
         p->hardware.max_cube_dim[0], p->hardware.max_cube_dim[1], p->hardware.max_cube_dim[2],
         p->hardware.max_units_per_cube, p->hardware.max_cube_count[0],
         p->hardware.max_cube_count[1], p->hardware.max_cube_count[2]);
  printf("    shared memory %s per cube; timing %s; layout %s\n",
         fmt_bytes(p->hardware.max_shared_memory_size, a, sizeof(a)),
         p->timing_method == CUBE_TIMING_DEVICE ? "device" : "system",
         p->layout_policy == CUBE_LAYOUT_POLICY_PITCHED ? "pitched" : "contiguous");
  uint32_t vs[8];
  size_t nv = 0;
  cube_status_free(cube_client_io_optimized_vector_sizes(c, 4, vs, 8, &nv));
  printf("    io vector sizes for f32:");
  for (size_t k = 0; k < nv && k < 8; ++k) printf(" %u", vs[k]);
  printf("\n");
  uint64_t bits = cube_client_features(c)->bits;
  printf("    features:");
  for (size_t k = 0; k < FEATURE_COUNT; ++k)
    if (bits & feature_names[k].bit) printf(" %s", feature_names[k].name);
  printf("\n");
  if (bits & CUBE_FEATURE_COLLECTIVES) {
    const char* detail = NULL;
    const char* t = cube_collective_transport(b, &detail);
    printf("    collectives: %s (%s)\n", t ? t : "none", detail ? detail : "");
  }
}

static void json_u32_array(const uint32_t* v, size_t n) {
  putchar('[');
  for (size_t k = 0; k < n; ++k) printf("%s%u", k ? "," : "", v[k]);
  putchar(']');
}

static void info_device_json(cube_client_t* c, cube_backend_t b) {
  const cube_device_properties_t* p = cube_client_properties(c);
  const cube_backend_info_t* info = cube_client_info(c);
  json_key("name");
  json_string(p->name);
  printf(",");
  json_key("runtime");
  json_string(info->version);
  printf(",");
  json_key("queue");
  json_string(cube_client_is_blocking(c) ? "inline" : "threaded");
  printf(",\"memory\":{\"total_bytes\":%" PRIu64 ",\"max_allocation_bytes\":%" PRIu64
         ",\"alignment_bytes\":%" PRIu64 "}",
         p->memory.total_memory, p->memory.max_page_size, p->memory.alignment);
  char cc[16] = "null"; /* 0: not a CUDA device */
  if (p->hardware.compute_capability)
    snprintf(cc, sizeof(cc), "\"%u.%u\"", p->hardware.compute_capability / 10,
             p->hardware.compute_capability % 10);
  printf(",\"hardware\":{\"multiprocessors\":%u,\"compute_capability\":%s,"
         "\"cpu_cores\":%u,\"l2_cache_bytes\":%" PRIu64 ",\"load_width_bits\":%u,"
         "\"plane_size_min\":%u,\"plane_size_max\":%u,\"max_vector_size\":%u,"
         "\"max_bindings\":%u,\"max_units_per_cube\":%u,\"shared_memory_bytes\":%" PRIu64
         ",\"tensor_cores\":%u,\"max_cube_dim\":",
         p->hardware.num_streaming_multiprocessors, cc, p->hardware.num_cpu_cores,
         p->hardware.l2_cache_size, p->hardware.load_width, p->hardware.plane_size_min,
         p->hardware.plane_size_max, p->hardware.max_vector_size, p->hardware.max_bindings,
         p->hardware.max_units_per_cube, p->hardware.max_shared_memory_size,
         p->hardware.num_tensor_cores);
  json_u32_array(p->hardware.max_cube_dim, 3);
  printf(",\"max_cube_count\":");
  json_u32_array(p->hardware.max_cube_count, 3);
  printf("}");
  printf(",\"timing\":\"%s\",\"layout\":\"%s\"",
         p->timing_method == CUBE_TIMING_DEVICE ? "device" : "system",
         p->layout_policy == CUBE_LAYOUT_POLICY_PITCHED ? "pitched" : "contiguous");
  uint32_t vs[8];
  size_t nv = 0;
  cube_status_free(cube_client_io_optimized_vector_sizes(c, 4, vs, 8, &nv));
  printf(",\"io_vector_sizes_f32\":");
  json_u32_array(vs, nv < 8 ? nv : 8);
  uint64_t bits = cube_client_features(c)->bits;
  printf(",\"features\":[");
  int first = 1;
  for (size_t k = 0; k < FEATURE_COUNT; ++k) {
    if (!(bits & feature_names[k].bit)) continue;
    if (!first) putchar(',');
    json_string(feature_names[k].name);
    first = 0;
  }
  printf("]");
  printf(",\"collectives\":");
  if (bits & CUBE_FEATURE_COLLECTIVES) {
    const char* detail = NULL;
    const char* t = cube_collective_transport(b, &detail);
    printf("{\"transport\":");
    json_string(t);
    printf(",\"detail\":");
    json_string(detail);
    printf("}");
  } else {
    printf("null");
  }
}

static const char* option_source_name(cube_option_source_t s) {
  switch (s) {
    case CUBE_OPTION_SOURCE_DEFAULT: return "default";
    case CUBE_OPTION_SOURCE_ENVIRONMENT: return "environment";
    case CUBE_OPTION_SOURCE_API: return "API";
  }
  return "?";
}

static const char* option_type_name(cube_option_type_t t) {
  switch (t) {
    case CUBE_OPTION_TYPE_BOOL: return "bool";
    case CUBE_OPTION_TYPE_U32: return "u32";
    case CUBE_OPTION_TYPE_SIZE: return "size";
    case CUBE_OPTION_TYPE_SECONDS: return "seconds";
    case CUBE_OPTION_TYPE_ENUM: return "enum";
    case CUBE_OPTION_TYPE_STRING: return "string";
    case CUBE_OPTION_TYPE_PATH: return "path";
  }
  return "?";
}

/* Prints |status| as "cube <cmd>: <message>" on stderr and frees it;
 * returns 1 if there was one. */
static int report_failure(const char* cmd, cube_status_t status) {
  if (!status) return 0;
  fprintf(stderr, "cube %s: %s\n", cmd, cube_status_message(status));
  cube_status_free(status);
  return 1;
}

/* cube info --options: every option on one line (or one JSON object each). */
static int cmd_info_options(bool json) {
  static char value[8192];
  if (json) printf("{\"options\":[");
  for (int i = 0; cube_option_name((cube_option_t)i) != NULL; ++i) {
    cube_option_info_t info;
    cube_status_t st = cube_option_describe((cube_option_t)i, &info);
    if (st) return report_failure("info --options", st);
    cube_option_source_t source = CUBE_OPTION_SOURCE_DEFAULT;
    st = cube_option_get(info.name, value, sizeof(value), &source);
    if (st) return report_failure("info --options", st);
    const char* scope = info.scope == CUBE_OPTION_SCOPE_DEVICE ? "per device" : "process";
    if (json) {
      printf("%s{\"name\":", i ? "," : "");
      json_string(info.name);
      printf(",\"value\":");
      json_string(value[0] ? value : NULL);
      printf(",\"source\":");
      json_string(option_source_name(source));
      printf(",\"rejected\":%s,\"type\":", info.rejected ? "true" : "false");
      json_string(option_type_name(info.type));
      printf(",\"scope\":");
      json_string(info.scope == CUBE_OPTION_SCOPE_DEVICE ? "device" : "process");
      printf(",\"default\":");
      json_string(info.default_doc);
      printf(",\"accepted\":");
      json_string(info.accepted);
      printf(",\"doc\":");
      json_string(info.doc);
      printf("}");
    } else {
      char shown[8300];
      if (value[0])
        snprintf(shown, sizeof(shown), "%s=%s", info.name, value);
      else
        snprintf(shown, sizeof(shown), "%s unset (%s)", info.name, info.default_doc);
      printf("%-40s (%s%s)  %s %s, %s\n", shown, option_source_name(source),
             info.rejected ? "; environment value rejected" : "", scope,
             option_type_name(info.type), info.accepted);
    }
  }
  if (json) printf("]}\n");
  if (fflush(stdout) != 0 || ferror(stdout)) return 1;
  return report_failure("info --options", cube_options_check());
}

static int cmd_info(bool json) {
  /* A malformed option fails the command before anything is listed. */
  if (report_failure("info", cube_options_check())) return 1;
  cube_status_t cache_st;
  const char* cache_dir = cache_dir_and_status(&cache_st);
  if (json) {
    printf("{\"version\":");
    json_string(cube_version());
    printf(",\"default_backend\":");
    json_string(cube_backend_name(cube_backend_default()));
    printf(",\"kernel_cache\":{\"dir\":");
    json_string(cache_dir[0] ? cache_dir : NULL);
    printf(",\"disk\":\"%s\",\"reason\":",
           cache_st ? "unusable" : !cache_dir[0] ? "off" : "usable");
    json_string(cache_st ? cube_status_message(cache_st) : NULL);
    printf("},\"cpu_compiler\":");
    cube_cpu_compiler_info_t cc;
    memset(&cc, 0, sizeof(cc));
    cc.struct_size = sizeof(cc);
    cube_status_t cs = cube_cpu_compiler_info(&cc);
    if (cs) {
      printf("{\"error\":");
      json_string(cube_status_message(cs));
      printf("}");
    } else {
      printf("{\"command\":");
      json_string(cc.command);
      printf(",\"version\":");
      json_string(cc.version);
      printf(",\"flags\":");
      json_string(cc.flags);
      printf(",\"unit_loop_vectorised\":%s,\"report\":", cc.unit_loop_vectorised ? "true" : "false");
      json_string(cc.report);
      printf("}");
    }
    cube_status_free(cs);
    printf(",\"backends\":[");
  } else {
    printf("cube %s\n", cube_version());
    printf("default backend: %s\n", cube_backend_name(cube_backend_default()));
    if (cache_st)
      printf("kernel cache: %s (unusable)\n  %s\n", cache_dir[0] ? cache_dir : "(none)",
             cube_status_message(cache_st));
    else if (!cache_dir[0])
      printf("kernel cache: off (CUBE_CACHE_DIR=off)\n");
    else
      printf("kernel cache: %s\n", cache_dir);
    cube_cpu_compiler_info_t cc;
    memset(&cc, 0, sizeof(cc));
    cc.struct_size = sizeof(cc);
    cube_status_t cs = cube_cpu_compiler_info(&cc);
    if (cs) {
      printf("CPU kernel compiler: unavailable: %s\n", cube_status_message(cs));
    } else {
      printf("CPU kernel compiler: %s (%s)\n  flags: %s\n", cc.command, cc.version, cc.flags);
      printf("  unit loop: %s: %s\n", cc.unit_loop_vectorised ? "vectorised" : "NOT vectorised",
             cc.report);
    }
    cube_status_free(cs);
  }
  cube_status_free(cache_st);
  /* Every backend this library knows: cube_backend_name ends the list. */
  for (int b = 0; cube_backend_name((cube_backend_t)b); ++b) {
    cube_backend_t backend = (cube_backend_t)b;
    cube_status_t st = cube_backend_status(backend);
    size_t n = 0;
    cube_status_free(cube_enumerate_devices(backend, NULL, 0, &n)); /* valid backend: CUBE_OK */
    if (json) {
      printf("%s{\"name\":", b ? "," : "");
      json_string(cube_backend_name(backend));
      printf(",\"available\":%s,\"reason\":", st ? "false" : "true");
      json_string(st ? cube_status_message(st) : NULL);
      printf(",\"device_count\":%zu,\"devices\":[", n);
    } else {
      printf("backend %-7s %s, %zu device%s%s%s\n", cube_backend_name(backend),
             st ? "unavailable" : "available", n, n == 1 ? "" : "s", st ? ": " : "",
             st ? cube_status_message(st) : "");
    }
    cube_status_free(st);
    for (size_t i = 0; i < n; ++i) {
      cube_client_t* c;
      cube_status_t s = cube_client_load((cube_device_id_t){backend, (uint32_t)i}, &c);
      if (json) printf("%s{\"index\":%zu,\"id\":\"%s:%zu\",", i ? "," : "", i,
                       cube_backend_name(backend), i);
      if (s) {
        if (json) {
          json_key("error");
          json_string(cube_status_message(s));
          printf("}");
        } else {
          printf("  device %zu: %s\n", i, cube_status_message(s));
        }
        cube_status_free(s);
        continue;
      }
      if (json) {
        printf("\"error\":null,");
        info_device_json(c, backend);
        printf("}");
      } else {
        info_device_text(c, backend, i);
      }
      cube_client_release(c);
    }
    if (json) printf("]}");
  }
  if (json) printf("]}\n");
  cube_shutdown();
  return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
}

//===----------------------------------------------------------------------===//
// demo
//===----------------------------------------------------------------------===//

/* The demo's kernels in the cube dialect (docs/dialect.md): compiled by the
 * backend on first launch and kept in the kernel cache. */
static const char* demo_source =
    "#ifndef BLOCK\n"
    "#define BLOCK 256 /* a compile-time constant; each define set is its own kernel */\n"
    "#endif\n"
    "#define ITEMS 4 /* values each unit adds before the tree */\n"
    "\n"
    "CUBE_KERNEL(saxpy, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), float a) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < CUBE_LEN(y)) CUBE_STORE(y, i, a * CUBE_LOAD(x, i) + CUBE_LOAD(y, i));\n"
    "}\n"
    "\n"
    "/* Per-cube partial sums of BLOCK * ITEMS values: each unit adds ITEMS of\n"
    " * them (a cube's BLOCK apart), then a tree in cube-local memory, one\n"
    " * barrier per level. */\n"
    "CUBE_KERNEL(partial_sum, CUBE_ARRAY(const float, x), CUBE_ARRAY(double, out)) {\n"
    "  CUBE_SHARED(double, tile, BLOCK);\n"
    "  uint32_t u = UNIT_POS_X;\n"
    "  uint64_t base = (uint64_t)CUBE_POS_X * BLOCK * ITEMS + u;\n"
    "  double acc = 0.0;\n"
    "  for (uint32_t k = 0; k < ITEMS; ++k) {\n"
    "    uint64_t i = base + (uint64_t)k * BLOCK;\n"
    "    if (i < CUBE_LEN(x)) acc += (double)x[i];\n"
    "  }\n"
    "  tile[u] = acc;\n"
    "  sync_cube();\n"
    "  for (uint32_t s = BLOCK / 2; s > 0; s >>= 1) {\n"
    "    if (u < s) tile[u] += tile[u + s];\n"
    "    sync_cube();\n"
    "  }\n"
    "  if (u == 0) CUBE_STORE(out, CUBE_POS_X, tile[0]);\n"
    "}\n"
    "\n"
    "/* m[r][c] *= s over a rank-2 tensor with the given row stride: one cube a row. */\n"
    "CUBE_KERNEL(scale_rows, CUBE_ARRAY(float, m), float s, uint64_t row_stride, uint64_t cols) {\n"
    "  uint64_t r = CUBE_POS_X;\n"
    "  for (uint64_t c = 0; c < cols; ++c) CUBE_STORE(m, r * row_stride + c, s * CUBE_LOAD(m, r * row_stride + c));\n"
    "}\n";

/* m[r][c] *= s over a rank-2 tensor with row stride args[2]. */
static int scale_rows(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  (void)n;
  float* m = args[0].buffer.data;
  float s = args[1].f32;
  uint64_t row_stride = args[2].u64, cols = args[3].u64;
  uint32_t r = cube->cube_pos[0];
  for (uint64_t c = 0; c < cols; ++c) m[r * row_stride + c] *= s;
  return 0;
}

static int failures = 0;
#define DEMO_CHECK(cond, ...)                   \
  do {                                          \
    if (cond) {                                 \
      printf("  ok    ");                       \
    } else {                                    \
      printf("  FAIL  ");                       \
      ++failures;                               \
    }                                           \
    printf(__VA_ARGS__);                        \
    printf("\n");                               \
  } while (0)

#define TRY(expr)                                                           \
  do {                                                                      \
    cube_status_t s_ = (expr);                                              \
    if (s_) {                                                               \
      printf("  FAIL  %s: [%s] %s\n", #expr,                                \
             cube_status_code_name(cube_status_code(s_)), cube_status_message(s_)); \
      cube_status_free(s_);                                                 \
      return 1;                                                             \
    }                                                                       \
  } while (0)

static void log_line(void* user, const char* line) {
  (void)user;
  printf("  profile | %s\n", line);
}

typedef struct {
  cube_client_t* c;
  cube_kernel_t* k;
  cube_handle_t x, y;
  uint32_t cubes;
} profile_arg_t;

static cube_status_t profiled_launch(void* p) {
  profile_arg_t* a = p;
  cube_arg_t args[] = {cube_arg_buffer(a->x), cube_arg_buffer(a->y), cube_arg_f32(0.5f)};
  return cube_client_launch(a->c, a->k, cube_count_static(a->cubes, 1, 1), 3, args);
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
/* Uniform in [-0.5, 0.5) from 23 bits of |r| as the mantissa of a float in
 * [1, 2) (no conversion, no division). */
static float bits_to_float(uint64_t r) {
  uint32_t bits = 0x3F800000u | (uint32_t)(r >> 41);
  float f;
  memcpy(&f, &bits, sizeof(f));
  return f - 1.5f;
}

static float rand_float(void) {
  rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
  return bits_to_float(rng * 0x2545F4914F6CDD1Dull);
}

/* The |i|-th value of a counter-based stream (a splitmix64 finaliser): no
 * value depends on the one before, so a loop of them runs in parallel in the
 * core. */
static uint64_t hash_u64(uint64_t i) {
  uint64_t z = i * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* x from the high 23 bits of each value, y from the low 23, over [begin, end). */
static void fill_range(float* x, float* y, int begin, int end) {
  for (int i = begin; i < end; ++i) {
    uint64_t h = hash_u64((uint64_t)i);
    x[i] = bits_to_float(h);
    y[i] = bits_to_float(h << 41);
  }
}

typedef struct fill_job {
  float* x;
  float* y;
  int begin, end;
  double x_sum; /* the sum of x over the range, for the reduction's check */
} fill_job_t;

static void* fill_main(void* p) {
  fill_job_t* j = p;
  fill_range(j->x, j->y, j->begin, j->end);
  /* Four partial sums: no chain of dependent adds through the whole range. */
  double s[4] = {0, 0, 0, 0};
  int i = j->begin;
  for (; i + 4 <= j->end; i += 4)
    for (int k = 0; k < 4; ++k) s[k] += j->x[i + k];
  for (; i < j->end; ++i) s[0] += j->x[i];
  j->x_sum = (s[0] + s[1]) + (s[2] + s[3]);
  return NULL;
}

/* Fills the |n| values of x and y on up to one thread per online CPU (at
 * most 16, at least 64 Ki values each), this thread among them: each value
 * depends on its index only, so the result is the same on any number of
 * threads, and the first writes into fresh staging pages (page faults,
 * zeroing) are spread as well. A thread that cannot be started leaves its
 * range to this one. Returns the sum of x (the host's side of the
 * reduction's check, summed where the values are made). */
static double fill_data(float* x, float* y, int n) {
  enum { MAX_THREADS = 16, MIN_VALUES = 1 << 16 };
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int t = cpus < 1 ? 1 : cpus > MAX_THREADS ? MAX_THREADS : (int)cpus;
  if (t > n / MIN_VALUES) t = n / MIN_VALUES > 0 ? n / MIN_VALUES : 1;
  fill_job_t jobs[MAX_THREADS];
  pthread_t th[MAX_THREADS];
  bool started[MAX_THREADS] = {false};
  for (int i = 0; i < t; ++i)
    jobs[i] = (fill_job_t){x, y, (int)((int64_t)n * i / t), (int)((int64_t)n * (i + 1) / t), 0.0};
  for (int i = 1; i < t; ++i) started[i] = pthread_create(&th[i], NULL, fill_main, &jobs[i]) == 0;
  fill_main(&jobs[0]);
  double sum = jobs[0].x_sum;
  for (int i = 1; i < t; ++i) {
    if (started[i])
      pthread_join(th[i], NULL);
    else
      fill_main(&jobs[i]);
    sum += jobs[i].x_sum;
  }
  return sum;
}

/* Loads (or compiles) the demo's dialect kernels while the host fills its
 * data: cube_client_precompile on a thread of its own. */
typedef struct precompile_job {
  cube_client_t* c;
  cube_kernel_t* kernels[2];
  cube_status_t status;
} precompile_job_t;

static void* precompile_main(void* p) {
  precompile_job_t* j = p;
  j->status = cube_client_precompile(j->c, 2, j->kernels, CUBE_EXEC_CHECKED);
  return NULL;
}

/* Where the demo's time goes: the end of each phase since the start. */
typedef struct demo_phases {
  uint64_t start_ns;
  int count;
  const char* name[12];
  uint64_t at_ns[12];
} demo_phases_t;

static uint64_t demo_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void demo_phase(demo_phases_t* p, const char* name) {
  if (p->count < 12) {
    p->name[p->count] = name;
    p->at_ns[p->count++] = demo_now_ns();
  }
}

static int cmd_demo(void) {
  demo_phases_t ph = {demo_now_ns(), 0, {0}, {0}};
  /* A malformed option would otherwise be a failed check on stdout. */
  if (report_failure("demo", cube_options_check())) return 1;
  cube_device_id_t dev = {cube_backend_default(), 0};
  cube_server_options_t opts;
  cube_server_options_initialize(&opts);
  opts.profile_level = CUBE_PROFILE_BASIC;
  opts.log_fn = log_line;
  cube_client_t* c;
  TRY(cube_client_init(dev, &opts, &c));
  const cube_device_properties_t* p = cube_client_properties(c);
  printf("demo on %s (%s queue)\n", p->name, cube_client_is_blocking(c) ? "inline" : "threaded");
  demo_phase(&ph, "client");

  /* 1. Contiguous upload + saxpy. The host data lives in staging buffers
   * (cube_client_reserve_staging: pinned memory on a GPU, from which uploads
   * go fastest; on the CPU large buffers mapped with huge pages where the
   * system has them), kept for the checks below. While the host fills it (on
   * several threads), a thread of its own loads the two dialect kernels from
   * the kernel cache (or compiles them: a cold start), so that their first
   * launches find them ready. */
  enum { N = 1 << 20, DIM = 256 };
  cube_kernel_desc_t d1 = {.cube_dim = {DIM, 1, 1}, .source = demo_source, .entry = "saxpy"};
  cube_kernel_t* k_saxpy;
  TRY(cube_kernel_create(&d1, &k_saxpy));
  cube_define_t block[] = {{"BLOCK", "256"}}; /* = DIM */
  cube_kernel_desc_t d2 = {.cube_dim = {DIM, 1, 1}, .source = demo_source, .entry = "partial_sum",
                           .defines = block, .define_count = 1};
  cube_kernel_t* k_sum;
  TRY(cube_kernel_create(&d2, &k_sum));
  precompile_job_t pre = {c, {k_saxpy, k_sum}, CUBE_OK};
  pthread_t pre_thread;
  bool pre_started = pthread_create(&pre_thread, NULL, precompile_main, &pre) == 0;
  size_t host_sizes[2] = {N * sizeof(float), N * sizeof(float)};
  cube_bytes_t* staged[2] = {NULL, NULL};
  cube_status_t st = cube_client_reserve_staging(c, 2, host_sizes, staged);
  double host = 0; /* the sum of x */
  if (!st) host = fill_data(cube_bytes_data(staged[0]), cube_bytes_data(staged[1]), N);
  if (pre_started)
    pthread_join(pre_thread, NULL);
  else
    precompile_main(&pre);
  if (st && pre.status) { /* the first failure is the one reported */
    cube_status_free(pre.status);
    pre.status = CUBE_OK;
  }
  TRY(st);
  TRY(pre.status);
  float* x = cube_bytes_data(staged[0]);
  float* y = cube_bytes_data(staged[1]);
  demo_phase(&ph, "data");
  cube_handle_t hx, hy;
  TRY(cube_client_create_from_slice(c, x, N * sizeof(float), &hx));
  TRY(cube_client_create_from_slice(c, y, N * sizeof(float), &hy));
  demo_phase(&ph, "uploads");
  cube_arg_t a1[] = {cube_arg_buffer(hx), cube_arg_buffer(hy), cube_arg_f32(2.0f)};
  TRY(cube_client_launch(c, k_saxpy, cube_count_static(N / DIM, 1, 1), 3, a1));
  cube_bytes_t* out;
  TRY(cube_client_read_one(c, hy, &out));
  demo_phase(&ph, "saxpy");
  const float* got = cube_bytes_const_data(out);
  int bad = 0;
  /* The compiled kernel may fuse a*x+y into one FMA: compare within an ulp.
   * y still holds what was uploaded. */
  for (int i = 0; i < N; ++i) {
    float expect = 2.0f * x[i] + y[i];
    bad += fabsf(got[i] - expect) > 1e-6f * (1.0f + fabsf(expect));
  }
  DEMO_CHECK(bad == 0, "saxpy (dialect kernel) over %d floats: %d mismatches", N, bad);
  cube_bytes_release(out);

  /* 2. Reduction with cube-local memory: a partial sum per cube of DIM * 4
   * values (the kernel's ITEMS). */
  enum { PER_CUBE = DIM * 4, PARTS = N / PER_CUBE };
  cube_handle_t hpart;
  TRY(cube_client_empty(c, PARTS * sizeof(double), &hpart));
  cube_arg_t a2[] = {cube_arg_buffer(hx), cube_arg_buffer(hpart)};
  TRY(cube_client_launch(c, k_sum, cube_count_static(PARTS, 1, 1), 2, a2));
  TRY(cube_client_read_one(c, hpart, &out));
  demo_phase(&ph, "sum");
  double total = 0;
  for (int i = 0; i < PARTS; ++i) total += ((const double*)cube_bytes_const_data(out))[i];
  DEMO_CHECK(fabs(total - host) <= 1e-6 * (fabs(host) + 1),
             "sum of %d floats (dialect kernel, sync_cube): %.6f (host %.6f)", N, total, host);
  cube_bytes_release(out);

  /* 3. Three tensors packed into one buffer, one scaled in place. */
  enum { R = 3, C = 5, V = 7, B = 1001 };
  float m[R * C];
  double v[V];
  uint8_t bytes[B];
  for (int i = 0; i < R * C; ++i) m[i] = rand_float();
  for (int i = 0; i < V; ++i) v[i] = rand_float();
  for (int i = 0; i < B; ++i) bytes[i] = (uint8_t)(rand_float() * 255);
  cube_layout_desc_t descs[3];
  uint64_t sm[2] = {R, C}, sv[1] = {V}, sb[1] = {B};
  TRY(cube_layout_desc_initialize(CUBE_LAYOUT_OPTIMIZED, 2, sm, 4, &descs[0]));
  TRY(cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, 1, sv, 8, &descs[1]));
  TRY(cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, 1, sb, 1, &descs[2]));
  const void* datas[3] = {m, v, bytes};
  size_t sizes[3] = {sizeof(m), sizeof(v), sizeof(bytes)};
  cube_tensor_t t[3];
  TRY(cube_client_create_tensors_from_slices(c, 3, descs, datas, sizes, t));
  printf("  packed 3 tensors in one buffer of %" PRIu64 " bytes at offsets %" PRIu64 ", %" PRIu64
         ", %" PRIu64 "\n",
         cube_handle_buffer_size(t[0].handle), cube_handle_offset(t[0].handle),
         cube_handle_offset(t[1].handle), cube_handle_offset(t[2].handle));
  cube_arg_kind_t scale_kinds[] = {CUBE_ARG_BUFFER, CUBE_ARG_F32, CUBE_ARG_U64, CUBE_ARG_U64};
  /* A native C kernel beside the dialect ones where the backend takes them
   * (the CPU), else the same operation in the dialect. */
  bool native = (cube_client_features(c)->bits & CUBE_FEATURE_NATIVE_KERNELS) != 0;
  cube_kernel_desc_t d3 = {.name = "scale_rows", .cube_dim = {1, 1, 1}, .arg_kinds = scale_kinds,
                           .arg_count = 4, .cpu_fn = scale_rows};
  if (!native)
    d3 = (cube_kernel_desc_t){.cube_dim = {1, 1, 1}, .source = demo_source, .entry = "scale_rows"};
  cube_kernel_t* k_scale;
  TRY(cube_kernel_create(&d3, &k_scale));
  cube_arg_t a3[] = {cube_arg_buffer(t[0].handle), cube_arg_f32(3.0f), cube_arg_u64(t[0].strides[0]),
                     cube_arg_u64(C)};
  TRY(cube_client_launch(c, k_scale, cube_count_static(R, 1, 1), 4, a3));
  cube_bytes_t* outs[3];
  TRY(cube_client_read_tensor(c, 3, t, outs));
  bad = 0;
  for (int i = 0; i < R * C; ++i) bad += ((const float*)cube_bytes_const_data(outs[0]))[i] != m[i] * 3.0f;
  bad += memcmp(cube_bytes_const_data(outs[1]), v, sizeof(v)) != 0;
  bad += memcmp(cube_bytes_const_data(outs[2]), bytes, sizeof(bytes)) != 0;
  DEMO_CHECK(bad == 0, "packed tensors [3x5 f32 scaled (%s kernel), 7 f64, 1001 u8] read back: %d mismatches",
             native ? "native C" : "dialect", bad);
  cube_bytes_release_array(outs, 3);

  demo_phase(&ph, "tensors");
  /* 4. A measured launch. */
  profile_arg_t pa = {c, k_saxpy, hx, hy, N / DIM};
  cube_profile_duration_t dur;
  TRY(cube_client_profile(c, profiled_launch, &pa, "saxpy (profiled)", &dur));
  DEMO_CHECK(cube_profile_duration_ns(&dur) > 0, "profiled saxpy took %.3f ms",
             cube_profile_duration_ns(&dur) / 1e6);

  /* 5. Memory usage, then the profile summary printed by sync. */
  cube_memory_usage_t u;
  TRY(cube_client_memory_usage(c, &u));
  char line[256];
  printf("  memory: %s\n", cube_memory_usage_format(&u, line, sizeof(line)));
  /* The device's memory as the driver counts it, and what cube can name of
   * it (docs/observability.md, "The memory ledger"). */
  cube_memory_ledger_t led;
  memset(&led, 0, sizeof(led));
  led.struct_size = sizeof(led);
  TRY(cube_client_memory_ledger(c, &led));
  char lb[7][32];
  printf("  memory ledger: pools %s, modules %s, context %s, collectives %s; %s %s; "
         "unaccounted %s%s (pinned staging %s, host memory)\n",
         fmt_bytes(led.pools, lb[0], sizeof(lb[0])),
         fmt_bytes(led.modules, lb[1], sizeof(lb[1])),
         fmt_bytes(led.context, lb[2], sizeof(lb[2])),
         fmt_bytes(led.collectives, lb[3], sizeof(lb[3])),
         led.driver_reports ? "the driver reports used" : "cube's own sum (no driver figure)",
         fmt_bytes(led.driver_used, lb[4], sizeof(lb[4])), led.unaccounted < 0 ? "-" : "",
         fmt_bytes(led.unaccounted < 0 ? (uint64_t)-led.unaccounted
                                               : (uint64_t)led.unaccounted,
                           lb[5], sizeof(lb[5])),
         fmt_bytes(led.staging, lb[6], sizeof(lb[6])));
  DEMO_CHECK(u.number_allocs == 4, "memory usage counts %" PRIu64 " live slices (4 expected: x, y, partial sums, the packed buffer)",
             u.number_allocs);
  printf("  profile summary (printed by sync):\n");
  TRY(cube_client_sync(c));
  demo_phase(&ph, "profile");

  for (int i = 0; i < 3; ++i) cube_tensor_release(&t[i]);
  cube_handle_release(hx);
  cube_handle_release(hy);
  cube_handle_release(hpart);
  TRY(cube_client_memory_cleanup(c));
  TRY(cube_client_memory_usage(c, &u));
  DEMO_CHECK(u.number_allocs == 0 && u.bytes_reserved == 0,
             "after release and cleanup: %" PRIu64 " allocations, %" PRIu64 " bytes reserved",
             u.number_allocs, u.bytes_reserved);
  /* 6. What the kernel cache did: a cold start compiles, a warm one (or one
   * after `cube bundle import`) loads from disk. */
  cube_kernel_cache_stats_t ks = {0};
  ks.struct_size = sizeof(ks);
  TRY(cube_kernel_cache_stats(&ks));
  printf("  kernel cache: %llu compiled, %llu loaded from disk, %llu found in memory "
         "(compiling took %.1f ms)\n",
         (unsigned long long)ks.misses, (unsigned long long)ks.disk_hits,
         (unsigned long long)ks.memory_hits, ks.compile_ns / 1e6);
  cube_kernel_release(k_saxpy);
  cube_kernel_release(k_sum);
  cube_kernel_release(k_scale);
  cube_client_release(c);
  cube_shutdown();
  cube_bytes_release_array(staged, 2);
  demo_phase(&ph, "shutdown");
  /* Each phase's own time (a cold start's compiles, or a warm one's loads
   * from the kernel cache, are in "data": they run beside the fill). */
  printf("  time:");
  for (int i = 0; i < ph.count; ++i)
    printf("%s %s %.1f ms", i ? "," : "", ph.name[i],
           (double)(ph.at_ns[i] - (i ? ph.at_ns[i - 1] : ph.start_ns)) / 1e6);
  printf("; in all %.1f ms\n",
         ph.count ? (double)(ph.at_ns[ph.count - 1] - ph.start_ns) / 1e6 : 0.0);
  printf("demo: %s\n", failures ? "FAILED" : "all checks passed");
  return failures ? 1 : 0;
}

static int cmd_cache(bool clear) {
  if (clear) {
    cube_status_t st = cube_kernel_cache_clear();
    if (st) {
      fprintf(stderr, "cube cache clear: %s\n", cube_status_message(st));
      cube_status_free(st);
      return 1;
    }
    const char* dir = cube_kernel_cache_dir();
    printf("kernel cache cleared: %s\n", dir[0] ? dir : "(disk cache off: CUBE_CACHE_DIR=off)");
    return 0;
  }
  cube_kernel_cache_stats_t s = {0};
  cube_status_t st = cube_kernel_cache_stats(&s);
  if (st) {
    fprintf(stderr, "cube cache: %s\n", cube_status_message(st));
    cube_status_free(st);
    return 1;
  }
  char b[32];
  cube_status_t dir_st;
  const char* dir = cache_dir_and_status(&dir_st);
  printf("kernel cache: %s\n", dir[0] ? dir : "(disk cache off: CUBE_CACHE_DIR=off)");
  if (dir_st) {
    /* Not a failure of this command: it reports the cache as it is. */
    printf("  %s\n", cube_status_message(dir_st));
    cube_status_free(dir_st);
  }
  printf("  entries on disk: %llu, %s\n", (unsigned long long)s.disk_entries,
         fmt_bytes(s.disk_bytes, b, sizeof(b)));
  printf("  this process: %llu memory hits, %llu disk hits, %llu misses, %llu failed compiles, "
         "%llu corrupt entries rebuilt\n",
         (unsigned long long)s.memory_hits, (unsigned long long)s.disk_hits,
         (unsigned long long)s.misses, (unsigned long long)s.compile_failures,
         (unsigned long long)s.corrupt_entries);
  return 0;
}

static int report_status(const char* what, cube_status_t st) {
  if (!st) return 0;
  fprintf(stderr, "cube %s: [%s] %s\n", what, cube_status_code_name(cube_status_code(st)),
          cube_status_message(st));
  cube_status_free(st);
  return 1;
}

static int cmd_cache_list(void) {
  cube_kernel_cache_entry_t* e = NULL;
  size_t n = 0;
  if (report_status("cache list", cube_kernel_cache_list(&e, &n))) return 1;
  const char* dir = cube_kernel_cache_dir();
  printf("kernel cache: %s, %zu entries\n", dir[0] ? dir : "(disk cache off: CUBE_CACHE_DIR=off)",
         n);
  if (n) printf("  %-32s  %-5s  %-7s  %10s  %-20s  %s\n", "kernel", "kind", "backend", "size",
                "last use (UTC)", "version");
  for (size_t i = 0; i < n; ++i) {
    char b[32], when[32] = "?";
    time_t t = (time_t)e[i].last_use;
    struct tm tm;
    if (gmtime_r(&t, &tm)) strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
    if (!e[i].readable) {
      printf("  %-32s  %-5s  %-7s  %10s  %-20s  unreadable: %s\n", e[i].file, e[i].kind, "",
             fmt_bytes(e[i].size, b, sizeof(b)), when, e[i].why);
      continue;
    }
    printf("  %-32s  %-5s  %-7s  %10s  %-20s  %s\n", e[i].name[0] ? e[i].name : "(unnamed)",
           e[i].kind, e[i].backend[0] ? e[i].backend : "-", fmt_bytes(e[i].size, b, sizeof(b)),
           when, e[i].version[0] ? e[i].version : "-");
  }
  cube_kernel_cache_list_free(e);
  return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
}

/* "123", "64K", "1.5G", "2MiB": bytes (suffixes are powers of 1024). */
static bool parse_size(const char* text, uint64_t* out) {
  char* end = NULL;
  double v = strtod(text, &end);
  if (end == text || !(v >= 0)) return false; /* also NaN */
  double mult = 1;
  switch (*end) {
    case 'k': case 'K': mult = 1024.0, ++end; break;
    case 'm': case 'M': mult = 1024.0 * 1024, ++end; break;
    case 'g': case 'G': mult = 1024.0 * 1024 * 1024, ++end; break;
    case 't': case 'T': mult = 1024.0 * 1024 * 1024 * 1024, ++end; break;
    default: break;
  }
  if (mult > 1 && (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0)) end += strlen(end);
  if (*end == 'B' && end[1] == '\0' && mult == 1) ++end;
  if (*end != '\0' || !(v * mult < 1.8e19)) return false; /* also inf */
  *out = (uint64_t)(v * mult);
  return true;
}

static int cmd_cache_prune(uint64_t max_bytes) {
  cube_kernel_cache_prune_report_t r = {0};
  r.struct_size = sizeof(r);
  if (report_status("cache prune", cube_kernel_cache_prune(max_bytes, &r))) return 1;
  char b1[32], b2[32];
  printf("kernel cache pruned: %s\n", cube_kernel_cache_dir()[0] ? cube_kernel_cache_dir()
                                                                 : "(disk cache off)");
  printf("  removed: %llu corrupt, %llu of other cube versions, %llu temporary files, %llu least "
         "recently used; %s\n",
         (unsigned long long)r.corrupt, (unsigned long long)r.other_version,
         (unsigned long long)r.temporary, (unsigned long long)r.evicted,
         fmt_bytes(r.removed_bytes, b1, sizeof(b1)));
  printf("  kept: %llu entries, %s\n", (unsigned long long)r.kept,
         fmt_bytes(r.kept_bytes, b2, sizeof(b2)));
  return 0;
}

static void print_bundle(const char* verb, const char* path, const cube_bundle_info_t* i) {
  char b[32];
  printf("%s %s: cube %s, %s, device '%s'\n", verb, path, i->version, i->backend, i->device);
  printf("  %llu entries (%llu compiled kernels, %llu tuning results), %s\n",
         (unsigned long long)i->entries, (unsigned long long)i->kernels,
         (unsigned long long)i->tunings, fmt_bytes(i->bytes, b, sizeof(b)));
}


//===----------------------------------------------------------------------===//
// cube memory FILE
//===----------------------------------------------------------------------===//

static double jnum(const cJSON* o, const char* key) {
  const cJSON* v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : 0.0;
}

static const char* jstr(const cJSON* o, const char* key, const char* fallback) {
  const cJSON* v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : fallback;
}

/* "1.50 MiB" as every memory message writes sizes. */
static const char* mem_size(double bytes, char* buf, size_t n) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  double v = bytes < 0 ? -bytes : bytes;
  while (v >= 1024.0 && i < 4) {
    v /= 1024.0;
    ++i;
  }
  if (i == 0)
    snprintf(buf, n, "%s%.0f B", bytes < 0 ? "-" : "", v);
  else
    snprintf(buf, n, "%s%.2f %s", bytes < 0 ? "-" : "", v, units[i]);
  return buf;
}

/* A snapshot is read whole; one larger than this is not one cube wrote for
 * a device (and a path such as /dev/zero is not read without end). */
#define SNAPSHOT_MAX_BYTES (1ull << 30)

/* |s| as printed to a terminal: control characters (C0, DEL and C1, which a
 * crafted file could use to move the cursor or rewrite earlier lines) read
 * as '?'. */
static const char* printable(const char* s, char* buf, size_t n) {
  size_t o = 0;
  for (const unsigned char* p = (const unsigned char*)s; *p && o + 1 < n; ++p) {
    bool c1 = p[0] == 0xC2 && p[1] >= 0x80 && p[1] <= 0x9F;
    if (*p < 0x20 || *p == 0x7F || c1) {
      buf[o++] = '?';
      p += c1;
    } else {
      buf[o++] = (char)*p;
    }
  }
  buf[o] = '\0';
  return buf;
}

/* The whole of |path| in *out (NUL-terminated, the caller frees); false with
 * the reason in |why|. */
static bool read_snapshot(const char* path, char** out, size_t* out_len, char* why, size_t n) {
  *out = NULL;
  FILE* f = fopen(path, "rb");
  if (!f) {
    snprintf(why, n, "cannot open '%s': %s", path, strerror(errno));
    return false;
  }
  size_t cap = 1 << 16, len = 0;
  char* text = malloc(cap);
  bool ok = text != NULL;
  while (ok) {
    size_t got = fread(text + len, 1, cap - len - 1, f);
    len += got;
    if (got == 0) break;
    if (len + 1 < cap) continue;
    if (cap > SNAPSHOT_MAX_BYTES) {
      snprintf(why, n, "'%s' is larger than %llu MiB: not a memory snapshot", path,
               (unsigned long long)(SNAPSHOT_MAX_BYTES >> 20));
      fclose(f);
      free(text);
      return false;
    }
    char* grown = realloc(text, cap * 2);
    ok = grown != NULL;
    if (ok) {
      text = grown;
      cap *= 2;
    }
  }
  if (!ok) {
    snprintf(why, n, "out of host memory reading '%s' (%zu bytes read)", path, len);
    fclose(f);
    free(text);
    return false;
  }
  if (ferror(f)) {
    int e = errno;
    snprintf(why, n, "cannot read '%s': %s", path, strerror(e));
    fclose(f);
    free(text);
    return false;
  }
  fclose(f);
  text[len] = '\0';
  *out = text;
  *out_len = len;
  return true;
}

/* Checks of the members cmd_memory prints (the schema is
 * docs/schemas/memory-snapshot.schema.json): a file that is damaged or made
 * by hand is refused with the member named, not printed as zeros. Each
 * returns the member, or NULL with |why| written. */
typedef struct {
  char* why;
  size_t n;
  bool failed;
} snap_check_t;

static const cJSON* snap_fail(snap_check_t* k, const char* where, const char* key,
                              const char* what, const cJSON* v) {
  if (k->failed) return NULL;
  k->failed = true;
  const char* type = !v                  ? "missing"
                     : cJSON_IsNumber(v) ? "a number"
                     : cJSON_IsString(v) ? "a string"
                     : cJSON_IsBool(v)   ? "a boolean"
                     : cJSON_IsNull(v)   ? "null"
                     : cJSON_IsArray(v)  ? "an array"
                                         : "an object";
  if (v && cJSON_IsNumber(v))
    snprintf(k->why, k->n, "\"%s%s%s\" is %.17g where %s was expected", where, *where ? "." : "",
             key, v->valuedouble, what);
  else
    snprintf(k->why, k->n, "\"%s%s%s\" is %s where %s was expected", where, *where ? "." : "",
             key, type, what);
  return NULL;
}

static const cJSON* snap_item(snap_check_t* k, const cJSON* o, const char* where, const char* key,
                              cJSON_bool (*is)(const cJSON*), const char* what) {
  const cJSON* v = cJSON_GetObjectItemCaseSensitive(o, key);
  return v && is(v) ? v : snap_fail(k, where, key, what, v);
}

/* A count of bytes or things: an integer from 0 to 2^64 (|signed_ok|: from
 * -2^63, the ledger's unaccounted remainder). */
static const cJSON* snap_count(snap_check_t* k, const cJSON* o, const char* where,
                               const char* key, bool signed_ok) {
  const cJSON* v = cJSON_GetObjectItemCaseSensitive(o, key);
  double x = v && cJSON_IsNumber(v) ? v->valuedouble : NAN;
  bool ok = isfinite(x) && x == floor(x) && x <= 18446744073709551616.0 &&
            (signed_ok ? x >= -9223372036854775808.0 : x >= 0);
  return ok ? v
            : snap_fail(k, where, key, signed_ok ? "an integer" : "a count (an integer >= 0)", v);
}

static void snap_usage(snap_check_t* k, const cJSON* o, const char* where, const char* key) {
  char at[96];
  snprintf(at, sizeof(at), "%s%s%s", where, *where ? "." : "", key);
  const cJSON* u = snap_item(k, o, where, key, cJSON_IsObject, "an object");
  static const char* const fields[] = {"number_allocs", "bytes_in_use", "bytes_padding",
                                       "bytes_reserved"};
  for (int i = 0; u && i < 4; ++i) snap_count(k, u, at, fields[i], false);
}

/* NULL when |doc| holds every member cmd_memory prints, of its type. */
static const char* snap_invalid(const cJSON* doc, char* why, size_t n) {
  snap_check_t k = {why, n, false};
  snap_count(&k, doc, "", "version", false);
  snap_item(&k, doc, "", "tracking", cJSON_IsBool, "a boolean");
  const cJSON* dev = snap_item(&k, doc, "", "device", cJSON_IsObject, "an object");
  if (dev) {
    snap_item(&k, dev, "device", "backend", cJSON_IsString, "a string");
    snap_count(&k, dev, "device", "index", false);
    snap_item(&k, dev, "device", "name", cJSON_IsString, "a string");
  }
  snap_usage(&k, doc, "", "total");
  snap_count(&k, doc, "", "memory_limit", false);
  const cJSON* l = snap_item(&k, doc, "", "ledger", cJSON_IsObject, "an object");
  if (l) {
    static const char* const fields[] = {"pools",       "modules",     "collectives", "context",
                                         "driver_used", "driver_total", "staging"};
    snap_item(&k, l, "ledger", "driver_reports", cJSON_IsBool, "a boolean");
    for (int i = 0; i < 7; ++i) snap_count(&k, l, "ledger", fields[i], false);
    snap_count(&k, l, "ledger", "unaccounted", true);
  }
  char at[64];
  const cJSON* e;
  int i = 0;
  cJSON_ArrayForEach(e, snap_item(&k, doc, "", "by_tag", cJSON_IsArray, "an array")) {
    snprintf(at, sizeof(at), "by_tag[%d]", i++);
    if (!cJSON_IsObject(e)) {
      snap_fail(&k, "", at, "an object", e);
      break;
    }
    const cJSON* t = cJSON_GetObjectItemCaseSensitive(e, "tag");
    if (!cJSON_IsString(t) && !cJSON_IsNull(t)) snap_fail(&k, at, "tag", "a string or null", t);
    snap_count(&k, e, at, "bytes", false);
    snap_count(&k, e, at, "count", false);
  }
  i = 0;
  cJSON_ArrayForEach(e, snap_item(&k, doc, "", "pools", cJSON_IsArray, "an array")) {
    snprintf(at, sizeof(at), "pools[%d]", i++);
    if (!cJSON_IsObject(e)) {
      snap_fail(&k, "", at, "an object", e);
      break;
    }
    snap_count(&k, e, at, "stream", false);
    snap_item(&k, e, at, "memory", cJSON_IsString, "a string");
    snap_item(&k, e, at, "name", cJSON_IsString, "a string");
    snap_item(&k, e, at, "kind", cJSON_IsString, "a string");
    snap_item(&k, e, at, "pages", cJSON_IsArray, "an array");
    snap_usage(&k, e, at, "usage");
    snap_count(&k, e, at, "peak_reserved", false);
    const cJSON* c = cJSON_GetObjectItemCaseSensitive(e, "cap");
    if (!cJSON_IsNull(c)) snap_count(&k, e, at, "cap", false);
    const cJSON* f = cJSON_GetObjectItemCaseSensitive(e, "fragmentation");
    if (!cJSON_IsNumber(f) || !(f->valuedouble >= 0 && f->valuedouble <= 1))
      snap_fail(&k, at, "fragmentation", "a number from 0 to 1", f);
  }
  const cJSON* ev = snap_item(&k, doc, "", "events", cJSON_IsObject, "an object");
  if (ev) {
    snap_count(&k, ev, "events", "capacity", false);
    snap_count(&k, ev, "events", "recorded", false);
    snap_count(&k, ev, "events", "dropped", false);
    i = 0;
    cJSON_ArrayForEach(e, snap_item(&k, ev, "events", "list", cJSON_IsArray, "an array")) {
      snprintf(at, sizeof(at), "events.list[%d]", i++);
      if (!cJSON_IsObject(e)) {
        snap_fail(&k, "", at, "an object", e);
        break;
      }
      snap_item(&k, e, at, "kind", cJSON_IsString, "a string");
    }
  }
  return k.failed ? why : NULL;
}

static int cmd_memory(const char* path) {
  char why[512];
  char* text = NULL;
  size_t len = 0;
  if (!read_snapshot(path, &text, &len, why, sizeof(why))) {
    fprintf(stderr, "cube memory: %s\n", why);
    return 1;
  }
  const char* parse_end = NULL;
  cJSON* doc = cJSON_ParseWithLengthOpts(text, len + 1, &parse_end, true);
  if (!doc) {
    size_t at = parse_end && parse_end >= text ? (size_t)(parse_end - text) : 0;
    size_t line = 1;
    for (size_t i = 0; i < at && i < len; ++i) line += text[i] == '\n';
    if (len == 0)
      fprintf(stderr, "cube memory: '%s' is empty: not a memory snapshot\n", path);
    else
      fprintf(stderr, "cube memory: '%s' is not JSON: the parser stopped at byte %zu (line %zu) "
                      "of %zu (a snapshot cut short, or another kind of file)\n",
              path, at, line, len);
    free(text);
    return 1;
  }
  free(text);
  if (strcmp(jstr(doc, "format", ""), "cube-memory-snapshot") != 0) {
    fprintf(stderr, "cube memory: '%s' is not a cube memory snapshot (no \"format\": "
                    "\"cube-memory-snapshot\")\n", path);
    cJSON_Delete(doc);
    return 1;
  }
  const cJSON* version = cJSON_GetObjectItemCaseSensitive(doc, "version");
  if (cJSON_IsNumber(version) && version->valuedouble != 1) {
    fprintf(stderr, "cube memory: '%s' is a memory snapshot of format version %.17g; this cube "
                    "reads version 1\n", path, version->valuedouble);
    cJSON_Delete(doc);
    return 1;
  }
  if (snap_invalid(doc, why, sizeof(why))) {
    char shown[1024];
    fprintf(stderr, "cube memory: '%s' is a damaged memory snapshot: %s\n", path,
            printable(why, shown, sizeof(shown)));
    cJSON_Delete(doc);
    return 1;
  }
  char a[32], b[32], c2[32], d[32], e[32], g[32];
  const cJSON* dev = cJSON_GetObjectItemCaseSensitive(doc, "device");
  char s1[256], s2[256], s3[256];
  /* A device's name starts with "<backend>:<index>" already ("cpu:0 (...)"). */
  snprintf(s3, sizeof(s3), "%s:%.0f", jstr(dev, "backend", "?"), jnum(dev, "index"));
  const char* name = jstr(dev, "name", "?");
  if (strncmp(name, s3, strlen(s3)) == 0 && (name[strlen(s3)] == '\0' || name[strlen(s3)] == ' '))
    s3[0] = '\0';
  printf("memory snapshot of %s%s%s%s, format version %.0f, tracking %s\n",
         printable(s3, s1, sizeof(s1)), *s3 ? " (" : "", printable(name, s2, sizeof(s2)),
         *s3 ? ")" : "", jnum(doc, "version"),
         cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(doc, "tracking")) ? "on" : "off");
  const cJSON* t = cJSON_GetObjectItemCaseSensitive(doc, "total");
  printf("device memory: %.0f buffers, %s in use, %s padding, %s reserved",
         jnum(t, "number_allocs"), mem_size(jnum(t, "bytes_in_use"), a, sizeof(a)),
         mem_size(jnum(t, "bytes_padding"), b, sizeof(b)),
         mem_size(jnum(t, "bytes_reserved"), c2, sizeof(c2)));
  if (jnum(doc, "memory_limit") > 0)
    printf(", limit %s", mem_size(jnum(doc, "memory_limit"), a, sizeof(a)));
  printf("\n");

  const cJSON* l = cJSON_GetObjectItemCaseSensitive(doc, "ledger");
  bool drv = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(l, "driver_reports"));
  printf("\nledger (%s):\n", drv ? "the driver's used against cube's own figures"
                                 : "the driver reports nothing: cube's own sum");
  printf("  pools %s + modules %s + collectives %s + context %s + unaccounted %s = used %s",
         mem_size(jnum(l, "pools"), a, sizeof(a)), mem_size(jnum(l, "modules"), b, sizeof(b)),
         mem_size(jnum(l, "collectives"), c2, sizeof(c2)),
         mem_size(jnum(l, "context"), d, sizeof(d)),
         mem_size(jnum(l, "unaccounted"), e, sizeof(e)),
         mem_size(jnum(l, "driver_used"), g, sizeof(g)));
  if (drv) printf(" of %s", mem_size(jnum(l, "driver_total"), a, sizeof(a)));
  printf("\n  pinned host staging (not device memory): %s\n",
         mem_size(jnum(l, "staging"), a, sizeof(a)));

  printf("\nlargest holders by tag:\n");
  const cJSON* tag;
  int shown = 0;
  double in_use = jnum(t, "bytes_in_use");
  cJSON_ArrayForEach(tag, cJSON_GetObjectItemCaseSensitive(doc, "by_tag")) {
    if (shown++ == 10) {
      printf("  ...\n");
      break;
    }
    double bytes = jnum(tag, "bytes");
    printf("  %-24s %12s in %5.0f buffer%s  %5.1f %%\n",
           printable(jstr(tag, "tag", "(untagged)"), s1, sizeof(s1)),
           mem_size(bytes, a, sizeof(a)), jnum(tag, "count"), jnum(tag, "count") == 1 ? " " : "s",
           in_use > 0 ? 100.0 * bytes / in_use : 0.0);
  }
  if (!shown) printf("  (no live buffers)\n");

  printf("\npools holding pages (fragmentation = 1 - largest free block / free bytes):\n");
  printf("  %-7s %-18s %-20s %-10s %6s %11s %11s %11s %11s %6s\n", "stream", "memory", "pool",
         "kind", "pages", "reserved", "in use", "peak", "cap", "frag");
  const cJSON* p;
  shown = 0;
  cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(doc, "pools")) {
    const cJSON* u = cJSON_GetObjectItemCaseSensitive(p, "usage");
    int pages = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(p, "pages"));
    if (pages == 0) continue;
    ++shown;
    const cJSON* pool_cap = cJSON_GetObjectItemCaseSensitive(p, "cap");
    printf("  %-7.0f %-18s %-20s %-10s %6d %11s %11s %11s %11s %6.3f\n", jnum(p, "stream"),
           printable(jstr(p, "memory", "?"), s1, sizeof(s1)),
           printable(jstr(p, "name", "?"), s2, sizeof(s2)),
           printable(jstr(p, "kind", "?"), s3, sizeof(s3)), pages,
           mem_size(jnum(u, "bytes_reserved"), a, sizeof(a)),
           mem_size(jnum(u, "bytes_in_use"), b, sizeof(b)),
           mem_size(jnum(p, "peak_reserved"), c2, sizeof(c2)),
           cJSON_IsNumber(pool_cap) ? mem_size(pool_cap->valuedouble, d, sizeof(d)) : "-",
           jnum(p, "fragmentation"));
  }
  if (!shown) printf("  (none)\n");

  const cJSON* ev = cJSON_GetObjectItemCaseSensitive(doc, "events");
  int allocs = 0, releases = 0, ooms = 0;
  const cJSON* x;
  cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(ev, "list")) {
    const char* k = jstr(x, "kind", "");
    allocs += strcmp(k, "alloc") == 0;
    releases += strcmp(k, "release") == 0;
    ooms += strcmp(k, "oom") == 0;
  }
  printf("\nrecent events: %d allocations, %d releases, %d out of memory (of %.0f recorded, "
         "%.0f dropped; the ring keeps %.0f)\n",
         allocs, releases, ooms, jnum(ev, "recorded"), jnum(ev, "dropped"), jnum(ev, "capacity"));
  cJSON_Delete(doc);
  return 0;
}

static int cmd_bundle(const char* verb, const char* path) {
  cube_bundle_info_t info;
  memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  char what[32];
  snprintf(what, sizeof(what), "bundle %s", verb);
  if (strcmp(verb, "show") == 0) {
    if (report_status(what, cube_bundle_describe(path, &info))) return 1;
    print_bundle("bundle", path, &info);
    return 0;
  }
  if (report_status(what, cube_options_check())) return 1;
  cube_client_t* c = NULL;
  if (report_status(what, cube_client_load((cube_device_id_t){cube_backend_default(), 0}, &c)))
    return 1;
  cube_status_t st = strcmp(verb, "export") == 0 ? cube_bundle_export(c, path, &info)
                                                 : cube_bundle_import(c, path, &info);
  cube_client_release(c);
  int rc = report_status(what, st);
  if (!rc) {
    print_bundle(strcmp(verb, "export") == 0 ? "exported" : "imported", path, &info);
    printf("  cache directory: %s\n", cube_kernel_cache_dir());
  }
  cube_shutdown();
  return rc;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fputs("cube: no command given\n", stderr);
    fputs(usage_text, stderr);
    return 2;
  }
  const char* name = argv[1];
  if (is_help(name)) {
    if (argc > 2) return usage_error(NULL, "unexpected argument '%s'", argv[2]);
    fputs(usage_text, stdout);
    return 0;
  }
  if (strcmp(name, "--version") == 0) {
    if (argc > 2) return usage_error(NULL, "unexpected argument '%s'", argv[2]);
    printf("cube %s\n", cube_version());
    return 0;
  }
  const command_t* cmd = find_command(name);
  if (!cmd) {
    if (name[0] == '-') return usage_error(NULL, "unknown option '%s'", name);
    return usage_error(NULL, "unknown command '%s'", name);
  }
  int rest = argc - 2;
  char** args = argv + 2;
  bool help = false;
  if (strcmp(cmd->name, "help") == 0) {
    if (rest > 1) return usage_error(cmd->name, "unexpected argument '%s'", args[1]);
    if (rest == 0) {
      fputs(usage_text, stdout);
      return 0;
    }
    if (is_help(args[0])) {
      fputs(cmd->usage, stdout);
      return 0;
    }
    const command_t* about = find_command(args[0]);
    if (!about) {
      fprintf(stderr, "cube help: unknown command '%s' (see 'cube --help')\n", args[0]);
      return 2;
    }
    fputs(about->usage, stdout);
    return 0;
  }
  if (strcmp(cmd->name, "info") == 0) {
    static const char* const accepted[] = {"--json", "--options", NULL};
    bool seen[2] = {false, false};
    int rc = check_args(cmd, rest, args, accepted, seen, &help);
    if (rc || help) return rc ? rc : (fputs(cmd->usage, stdout), 0);
    return seen[1] ? cmd_info_options(seen[0]) : cmd_info(seen[0]);
  }
  if (strcmp(cmd->name, "cache") == 0) {
    if (rest >= 1 && strcmp(args[0], "prune") == 0) {
      uint64_t max = 0;
      bool have_max = false;
      for (int i = 1; i < rest; ++i) {
        if (is_help(args[i])) return fputs(cmd->usage, stdout), 0;
      }
      for (int i = 1; i < rest; ++i) {
        if (strcmp(args[i], "--max") == 0 && have_max)
          return usage_error(cmd->name, "'%s' given twice", "--max");
        if (strcmp(args[i], "--max") == 0 && i + 1 < rest) {
          have_max = true;
          if (!parse_size(args[i + 1], &max) || max == 0)
            return usage_error(cmd->name, "--max takes a size above 0 (bytes, or 64M, 2G), not '%s'",
                               args[i + 1]);
          ++i;
          continue;
        }
        if (strcmp(args[i], "--max") == 0)
          return usage_error(cmd->name, "%s needs one size", "--max");
        if (args[i][0] == '-') return usage_error(cmd->name, "unknown option '%s'", args[i]);
        return usage_error(cmd->name, "unexpected argument '%s'", args[i]);
      }
      return cmd_cache_prune(max);
    }
    static const char* const accepted[] = {"clear", "list", NULL};
    bool seen[2] = {false, false};
    int rc = check_args(cmd, rest, args, accepted, seen, &help);
    if (rc || help) return rc ? rc : (fputs(cmd->usage, stdout), 0);
    if (seen[0] && seen[1]) return usage_error(cmd->name, "'%s' and 'clear' together", "list");
    return seen[1] ? cmd_cache_list() : cmd_cache(seen[0]);
  }
  if (strcmp(cmd->name, "bundle") == 0) {
    for (int i = 0; i < rest; ++i)
      if (is_help(args[i])) return fputs(cmd->usage, stdout), 0;
    if (rest == 0) return usage_error(cmd->name, "%s", "export, import or show, and a FILE");
    const char* verb = args[0];
    if (strcmp(verb, "export") != 0 && strcmp(verb, "import") != 0 && strcmp(verb, "show") != 0)
      return usage_error(cmd->name, "unknown action '%s' (export, import or show)", verb);
    if (rest < 2) return usage_error(cmd->name, "'%s' needs a FILE", verb);
    if (rest > 2) return usage_error(cmd->name, "unexpected argument '%s'", args[2]);
    return cmd_bundle(verb, args[1]);
  }
  if (strcmp(cmd->name, "memory") == 0) {
    for (int i = 0; i < rest; ++i)
      if (is_help(args[i])) return fputs(cmd->usage, stdout), 0;
    if (rest == 0) return usage_error(cmd->name, "%s", "a snapshot FILE");
    if (rest > 1) return usage_error(cmd->name, "unexpected argument '%s'", args[1]);
    return cmd_memory(args[0]);
  }
  /* demo */
  bool none[1] = {false};
  int rc = check_args(cmd, rest, args, NULL, none, &help);
  if (rc || help) return rc ? rc : (fputs(cmd->usage, stdout), 0);
  return cmd_demo();
}
