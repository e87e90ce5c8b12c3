/* Names of enumerations, their parsers, the memory usage line and the version. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <time.h>

#include "base/abi.h"
#include "base/options.h"
#include "base/status.h"
#include "cube/cube.h"

/* Backends ----------------------------------------------------------------- */

static const char* const cube__backend_names[] = {"cpu", "cuda", "opencl", "null"};
_Static_assert(sizeof(cube__backend_names) / sizeof(cube__backend_names[0]) == CUBE__BACKEND_COUNT,
               "a name for every backend");

const char* cube_backend_name(cube_backend_t backend) {
  if ((unsigned)backend >= (unsigned)CUBE__BACKEND_COUNT) return NULL;
  return cube__backend_names[backend];
}

cube_status_t cube_backend_parse(const char* name, cube_backend_t* out_backend) {
  if (!name) return CUBE_INVALID("cube_backend_parse: name is NULL");
  if (!out_backend) return CUBE_INVALID("cube_backend_parse: out_backend is NULL ('%s')", name);
  for (int b = 0; b < CUBE__BACKEND_COUNT; ++b) {
    if (strcasecmp(name, cube__backend_names[b]) == 0) {
      *out_backend = (cube_backend_t)b;
      return CUBE_OK;
    }
  }
  return CUBE_INVALID("cube_backend_parse: unknown backend '%s' (valid: cpu, cuda, opencl, null)",
                      name);
}

/* CUBE_BACKEND's words are the backend names, in cube_backend_t order; a
 * malformed value reads as the default (cpu) and the entry points report it. */
cube_backend_t cube_backend_default(void) {
  return (cube_backend_t)cube__option_enum(CUBE__OPT_BACKEND);
}

/* Element types -------------------------------------------------------------- */

uint32_t cube_dtype_size(cube_dtype_t dtype) {
  switch (dtype) {
    case CUBE_DTYPE_U8:
    case CUBE_DTYPE_I8: return 1;
    case CUBE_DTYPE_F16:
    case CUBE_DTYPE_BF16: return 2;
    case CUBE_DTYPE_U32:
    case CUBE_DTYPE_I32:
    case CUBE_DTYPE_F32: return 4;
    case CUBE_DTYPE_U64:
    case CUBE_DTYPE_I64:
    case CUBE_DTYPE_F64: return 8;
  }
  return 0;
}

const char* cube_dtype_name(cube_dtype_t dtype) {
  switch (dtype) {
    case CUBE_DTYPE_U8: return "u8";
    case CUBE_DTYPE_I8: return "i8";
    case CUBE_DTYPE_U32: return "u32";
    case CUBE_DTYPE_I32: return "i32";
    case CUBE_DTYPE_U64: return "u64";
    case CUBE_DTYPE_I64: return "i64";
    case CUBE_DTYPE_F16: return "f16";
    case CUBE_DTYPE_BF16: return "bf16";
    case CUBE_DTYPE_F32: return "f32";
    case CUBE_DTYPE_F64: return "f64";
  }
  return "unknown";
}

/* Profile levels -------------------------------------------------------------- */

const char* cube_profile_level_name(cube_profile_level_t level) {
  switch (level) {
    case CUBE_PROFILE_NONE: return "none";
    case CUBE_PROFILE_EXEC: return "exec";
    case CUBE_PROFILE_BASIC: return "basic";
    case CUBE_PROFILE_MEDIUM: return "medium";
    case CUBE_PROFILE_FULL: return "full";
  }
  return "unknown";
}

cube_status_t cube_profile_level_parse(const char* text, cube_profile_level_t* out_level) {
  static const struct {
    const char* name;
    cube_profile_level_t level;
  } table[] = {
      {"none", CUBE_PROFILE_NONE},     {"exec", CUBE_PROFILE_EXEC},
      {"basic", CUBE_PROFILE_BASIC},   {"medium", CUBE_PROFILE_MEDIUM},
      {"full", CUBE_PROFILE_FULL},
      /* CubeCL's config names (profiling.logger.level). */
      {"disabled", CUBE_PROFILE_NONE}, {"minimal", CUBE_PROFILE_EXEC},
  };
  if (!text) return CUBE_INVALID("cube_profile_level_parse: text is NULL");
  if (!out_level)
    return CUBE_INVALID("cube_profile_level_parse: out_level is NULL ('%s')", text);
  for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); ++i) {
    if (strcasecmp(text, table[i].name) == 0) {
      *out_level = table[i].level;
      return CUBE_OK;
    }
  }
  return CUBE_INVALID("cube_profile_level_parse: unknown profile level '%s' (valid: none, exec, "
                      "basic, medium, full; also disabled, minimal)",
                      text);
}

/* Memory usage ----------------------------------------------------------------- */

/* Sizes ------------------------------------------------------------------- */

const char* cube__format_bytes(uint64_t bytes, char* buf, size_t size) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0)
    snprintf(buf, size, "%llu B", (unsigned long long)bytes);
  else
    snprintf(buf, size, "%.2f %s", v, units[u]);
  return buf;
}

static double cube__percent(uint64_t num, uint64_t den) {
  return den ? (double)num / (double)den * 100.0 : 0.0;
}

const char* cube_memory_usage_format(const cube_memory_usage_t* usage, char* buf,
                                     size_t buf_size) {
  if (!buf || buf_size == 0) return buf;
  if (!usage) {
    snprintf(buf, buf_size, "(no memory usage)");
    return buf;
  }
  char in_use[32], padding[32], reserved[32];
  cube__format_bytes(usage->bytes_in_use, in_use, sizeof(in_use));
  cube__format_bytes(usage->bytes_padding, padding, sizeof(padding));
  cube__format_bytes(usage->bytes_reserved, reserved, sizeof(reserved));
  snprintf(buf, buf_size,
           "%" PRIu64 " allocations, %s in use, %s padding, %s reserved, usage efficiency "
           "%.2f%%, padding overhead %.2f%%",
           usage->number_allocs, in_use, padding, reserved,
           cube__percent(usage->bytes_in_use, usage->bytes_reserved),
           cube__percent(usage->bytes_padding, usage->bytes_in_use));
  return buf;
}

/* Version ------------------------------------------------------------------------ */

const char* cube_version(void) { return CUBE_VERSION_STRING; }

/* Time --------------------------------------------------------------------- */

/* The time of a failure (taint roots, lost devices). "2026-12-20T17:06:43.123456Z": now,
 * in UTC, computed here rather than by
 * gmtime_r, which takes glibc's time-zone lock (invisible to ThreadSanitizer,
 * which then reports its strdup of TZ racing another thread's tzset). Days to
 * a civil date: H. Hinnant's days_from_civil, inverted. */
void cube__utc_now(char* buf, size_t n) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int64_t secs = (int64_t)ts.tv_sec;
  int64_t days = secs >= 0 ? secs / 86400 : (secs - 86399) / 86400;
  int64_t sod = secs - days * 86400;
  int64_t z = days + 719468;
  int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  int64_t doe = z - era * 146097;
  int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  int64_t mp = (5 * doy + 2) / 153;
  int64_t day = doy - (153 * mp + 2) / 5 + 1;
  int64_t month = mp < 10 ? mp + 3 : mp - 9;
  int64_t year = yoe + era * 400 + (month <= 2);
  /* The bounds (% ...) say how wide each field is; they change no value
   * between the years 0 and 9999. */
  snprintf(buf, n, "%04u-%02u-%02uT%02u:%02u:%02u.%06uZ", (unsigned)(year % 10000),
           (unsigned)(month % 100), (unsigned)(day % 100), (unsigned)(sod / 3600 % 100),
           (unsigned)(sod / 60 % 60), (unsigned)(sod % 60),
           (unsigned)(ts.tv_nsec / 1000 % 1000000));
}
