/* fuzz_pools: operation sequences on one memory manager (src/memory/memory.h)
 * over a malloc-backed storage whose allocations fail when the input says so.
 *
 * Input: two configuration bytes (SubSlices or ExclusivePages ladder, a small
 * max page, the alignment, the persistent policy, the initial mode, a storage
 * limit, the teardown order), then
 * operations: reserve / reserve_bind of 0..~4 MiB, drop a handle, clone a
 * handle, take and drop a binding reference, explicit / implicit cleanup,
 * mode switch, storage failure injection, usage / report.
 *
 * Reference model: the live descriptors and their sizes. After every
 * operation: each live descriptor resolves, to its own size, inside its
 * storage buffer, at an aligned offset; no two live slices overlap (and the
 * fill pattern written into each is intact); usage.bytes_in_use is the sum of
 * live sizes and number_allocs the live count; the report agrees with usage.
 * At the end every storage buffer goes back (allocs == deallocs). */
#include <inttypes.h>
#include <string.h>

#include "base/status.h"
#include "fuzz_input.h"
#include "memory/memory.h"

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define MAX_LIVE 64

/* Storage ------------------------------------------------------------------ */

typedef struct fstorage {
  cube__storage_ops_t ops;
  uint64_t next_id;
  uint64_t allocs, deallocs, live_bytes;
  uint64_t limit;     /* refuse past this many live bytes (0 = none) */
  uint32_t fail_next; /* refuse the next N calls with OUT_OF_MEMORY */
  uint32_t fail_other; /* refuse the next N calls with INTERNAL */
} fstorage_t;

static cube_status_t fs_alloc(void* self, uint64_t size, cube__storage_t* out) {
  fstorage_t* fs = self;
  if (fs->fail_other) {
    fs->fail_other--;
    return cube__status_make(CUBE_STATUS_INTERNAL, "fuzz storage: injected failure");
  }
  if (fs->fail_next || (fs->limit && fs->live_bytes + size > fs->limit) || size > 256 * MiB) {
    if (fs->fail_next) fs->fail_next--;
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "fuzz storage: %" PRIu64 " bytes refused",
                             size);
  }
  void* p = malloc(size ? (size_t)size : 1);
  if (!p) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "fuzz storage: malloc failed");
  out->id = ++fs->next_id;
  out->ptr = p;
  out->size = size;
  out->backend_data = NULL;
  fs->allocs++;
  fs->live_bytes += size;
  return CUBE_OK;
}

static void fs_dealloc(void* self, const cube__storage_t* st) {
  fstorage_t* fs = self;
  FZ_ASSERT(fs->live_bytes >= st->size, "dealloc of %" PRIu64 " bytes with %" PRIu64 " live",
            st->size, fs->live_bytes);
  fs->deallocs++;
  fs->live_bytes -= st->size;
  free(st->ptr);
}

/* Model ---------------------------------------------------------------------- */

typedef struct live {
  cube__memory_t* m;
  uint64_t size;
  uint32_t handles;  /* our handle references */
  uint32_t bindings; /* our binding references */
  uint8_t fill;      /* pattern written into the slice */
} live_t;

typedef struct model {
  live_t live[MAX_LIVE];
  size_t count;
  uint8_t next_fill;
  uint64_t alignment;
} model_t;

static uint8_t pattern(uint8_t fill, uint64_t i) { return (uint8_t)(fill + i * 31u); }

/* Only the first and last KiB are filled and checked (pages are up to MiBs). */
static void fill_slice(const live_t* l) {
  const cube__storage_t* st;
  uint64_t off, size;
  if (!cube__memory_resolve(l->m, &st, &off, &size)) return;
  uint8_t* p = (uint8_t*)st->ptr + off;
  for (uint64_t i = 0; i < size && i < KiB; ++i) p[i] = pattern(l->fill, i);
  for (uint64_t i = size > KiB ? size - KiB : size; i < size; ++i) p[i] = pattern(l->fill, i);
}

static void check_slice_content(const live_t* l, const cube__storage_t* st, uint64_t off,
                                uint64_t size) {
  const uint8_t* p = (const uint8_t*)st->ptr + off;
  for (uint64_t i = 0; i < size && i < KiB; ++i)
    FZ_ASSERT(p[i] == pattern(l->fill, i), "slice of memory %" PRIu64 " overwritten at %" PRIu64,
              l->m->id, i);
  for (uint64_t i = size > KiB ? size - KiB : size; i < size; ++i)
    FZ_ASSERT(p[i] == pattern(l->fill, i), "slice of memory %" PRIu64 " overwritten at %" PRIu64,
              l->m->id, i);
}

static void check(cube__mm_t* mm, model_t* md, fstorage_t* fs) {
  uint64_t in_use = 0;
  for (size_t i = 0; i < md->count; ++i) {
    const live_t* a = &md->live[i];
    const cube__storage_t* sa;
    uint64_t oa, za;
    FZ_ASSERT(cube__memory_resolve(a->m, &sa, &oa, &za), "live memory %" PRIu64 " is unbound",
              a->m->id);
    FZ_ASSERT(za == a->size, "memory %" PRIu64 " resolves to %" PRIu64 " bytes, reserved %" PRIu64,
              a->m->id, za, a->size);
    FZ_ASSERT(oa <= sa->size && za <= sa->size - oa,
              "slice [%" PRIu64 ", +%" PRIu64 ") outside its storage of %" PRIu64, oa, za,
              sa->size);
    FZ_ASSERT(oa % md->alignment == 0, "slice offset %" PRIu64 " not aligned to %" PRIu64, oa,
              md->alignment);
    FZ_ASSERT(a->m->mm == mm, "memory %" PRIu64 " not owned by the manager", a->m->id);
    check_slice_content(a, sa, oa, za);
    in_use += za;
    for (size_t j = i + 1; j < md->count; ++j) {
      const live_t* b = &md->live[j];
      FZ_ASSERT(a->m != b->m, "one descriptor handed out twice");
      const cube__storage_t* sb;
      uint64_t ob, zb;
      FZ_ASSERT(cube__memory_resolve(b->m, &sb, &ob, &zb), "live memory unbound");
      if (sa->id != sb->id) {
        FZ_ASSERT(sa->ptr != sb->ptr, "two storage ids share one pointer");
        continue;
      }
      if (za == 0 || zb == 0) continue;
      FZ_ASSERT(oa + za <= ob || ob + zb <= oa,
                "live slices overlap: [%" PRIu64 ", +%" PRIu64 ") and [%" PRIu64 ", +%" PRIu64
                ") in storage %" PRIu64,
                oa, za, ob, zb, sa->id);
    }
  }
  cube_memory_usage_t u;
  cube__mm_usage(mm, &u);
  FZ_ASSERT(u.bytes_in_use == in_use, "usage.bytes_in_use %" PRIu64 ", live sizes %" PRIu64,
            u.bytes_in_use, in_use);
  FZ_ASSERT(u.number_allocs == md->count, "usage.number_allocs %" PRIu64 ", live count %zu",
            u.number_allocs, md->count);
  FZ_ASSERT(u.bytes_reserved == cube__mm_reserved_bytes(mm),
            "usage.bytes_reserved %" PRIu64 ", reserved_bytes %" PRIu64, u.bytes_reserved,
            cube__mm_reserved_bytes(mm));
  FZ_ASSERT(u.bytes_reserved == fs->live_bytes,
            "pools hold %" PRIu64 " bytes, the storage handed out %" PRIu64, u.bytes_reserved,
            fs->live_bytes);
  FZ_ASSERT(u.bytes_in_use + u.bytes_padding <= u.bytes_reserved,
            "in use %" PRIu64 " + padding %" PRIu64 " > reserved %" PRIu64, u.bytes_in_use,
            u.bytes_padding, u.bytes_reserved);
}

static void add_live(model_t* md, cube__memory_t* m, uint64_t size) {
  live_t* l = &md->live[md->count++];
  l->m = m;
  l->size = size;
  l->handles = 1;
  l->bindings = 0;
  l->fill = md->next_fill++;
  fill_slice(l);
}

static void remove_live(model_t* md, size_t i) { md->live[i] = md->live[--md->count]; }

/* Drops one of our references on live[i] (a binding first, if any when
 * |binding|); removes the entry when none is left. */
static void drop_ref(model_t* md, size_t i, bool binding) {
  live_t* l = &md->live[i];
  if (binding && l->bindings) {
    l->bindings--;
    cube__memory_unref(l->m);
  } else if (l->handles) {
    l->handles--;
    cube__memory_handle_unref(l->m);
  } else {
    l->bindings--;
    cube__memory_unref(l->m);
  }
  if (l->handles == 0 && l->bindings == 0) remove_live(md, i);
}

static uint64_t decode_size(fz_t* f) {
  uint8_t b = fz_u8(f);
  switch (b >> 5) {
    case 0:
      return b & 31; /* 0..31, 0 included */
    case 1:
    case 2:
      return fz_u16(f) % (4 * KiB + 1);
    case 3:
    case 4:
      return (uint64_t)fz_u16(f) * 16; /* up to ~1 MiB */
    case 5:
      return (uint64_t)fz_u16(f) * 64; /* up to ~4 MiB */
    case 6:
      return (UINT64_C(1) << (b & 31)) + (fz_u8(f) % 3) - 1; /* powers of two +-1 */
    default: /* past the small pools; rarely past every pool */
      return (uint64_t)fz_u32(f) % ((b & 1) ? 72 * MiB : 6 * MiB);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fz_t f = fz_make(data, size);
  /* Small max pages keep runs fast (ASan poisons whole buffers); one
   * configuration in eight is 40 MiB, enough for a SubSlices ladder rung. */
  static const uint64_t max_pages[] = {64 * KiB, 256 * KiB, 1 * MiB,  2 * MiB,
                                       4 * MiB,  96 * KiB,  512 * KiB, 40 * MiB};
  static const uint64_t aligns[] = {32, 256, 4096, 1};
  uint8_t c0 = fz_u8(&f), c1 = fz_u8(&f);

  fstorage_t fs;
  memset(&fs, 0, sizeof(fs));
  fs.ops.self = &fs;
  fs.ops.alignment = aligns[(c0 >> 2) & 3];
  fs.ops.alloc = fs_alloc;
  fs.ops.dealloc = fs_dealloc;
  fs.limit = (c1 & 0x80) ? (uint64_t)(((c1 >> 3) & 15) + 1) * 2 * MiB : 0;

  cube__mm_options_t o;
  memset(&o, 0, sizeof(o));
  o.name = "fuzz memory";
  o.config = (c0 & 1) ? CUBE_MEMORY_CONFIG_EXCLUSIVE_PAGES : CUBE_MEMORY_CONFIG_SUBSLICES;
  o.max_page_size = max_pages[(c0 >> 4) & 7];
  o.persistent = (cube__persistent_policy_t)(((c1 >> 1) & 3) % 3);
  o.mode = (c0 & 2) ? CUBE_ALLOCATION_PERSISTENT : CUBE_ALLOCATION_AUTO;

  cube__mm_t* mm = NULL;
  cube_status_t st = cube__mm_create(&o, &fs.ops, &mm);
  FZ_ASSERT(st == CUBE_OK, "cube__mm_create: %s", cube_status_message(st));

  model_t md;
  memset(&md, 0, sizeof(md));
  md.alignment = fs.ops.alignment;

  while (!fz_done(&f)) {
    uint8_t op = fz_u8(&f);
    switch (op % 12) {
      case 0:
      case 1:
      case 2: { /* reserve */
        uint64_t sz = decode_size(&f);
        if (md.count == MAX_LIVE) break;
        cube__memory_t* m = NULL;
        st = cube__mm_reserve(mm, sz, &m);
        if (st == CUBE_OK) {
          FZ_ASSERT(m != NULL, "reserve succeeded without a descriptor");
          FZ_ASSERT(cube__memory_can_mut(m), "a fresh descriptor is not mutable");
          add_live(&md, m, sz);
        } else {
          cube_status_code_t code = cube_status_code(st);
          FZ_ASSERT(m == NULL, "failed reserve returned a descriptor");
          FZ_ASSERT(code == CUBE_STATUS_OUT_OF_MEMORY || code == CUBE_STATUS_INTERNAL,
                    "reserve(%" PRIu64 "): unexpected %s: %s", sz, cube_status_code_name(code),
                    cube_status_message(st));
          if (code == CUBE_STATUS_OUT_OF_MEMORY) {
            uint64_t req = 0;
            cube_memory_report_t rep = {0};
            FZ_ASSERT(cube_status_oom_report(st, &req, &rep), "OOM without a report");
            FZ_ASSERT(req == sz, "OOM report asks %" PRIu64 ", reserve was %" PRIu64, req, sz);
          }
          cube_status_free(st);
        }
        break;
      }
      case 3: { /* reserve_bind on a client-created descriptor */
        uint64_t sz = decode_size(&f);
        if (md.count == MAX_LIVE) break;
        cube__memory_t* m = cube__memory_create();
        FZ_ASSERT(m != NULL, "cube__memory_create");
        FZ_ASSERT(!cube__memory_resolve(m, NULL, NULL, NULL), "unbound descriptor resolves");
        st = cube__mm_reserve_bind(mm, sz, m);
        if (st == CUBE_OK) {
          add_live(&md, m, sz);
          /* A second bind must be refused. */
          cube_status_t again = cube__mm_reserve_bind(mm, 1, m);
          FZ_ASSERT(cube_status_code(again) == CUBE_STATUS_FAILED_PRECONDITION,
                    "re-binding a bound descriptor: %s", cube_status_message(again));
          cube_status_free(again);
        } else {
          FZ_ASSERT(!cube__memory_resolve(m, NULL, NULL, NULL), "failed bind left it bound");
          cube_status_free(st);
          cube__memory_handle_unref(m);
        }
        break;
      }
      case 4:
      case 5: { /* drop a handle (or a binding) */
        uint8_t k = fz_u8(&f);
        if (md.count) drop_ref(&md, k % md.count, op & 0x80);
        break;
      }
      case 6: { /* clone a handle or take a binding */
        uint8_t k = fz_u8(&f);
        if (!md.count) break;
        live_t* l = &md.live[k % md.count];
        if (l->handles + l->bindings > 1000) break;
        if (op & 0x80) {
          cube__memory_ref(l->m);
          l->bindings++;
        } else {
          cube__memory_handle_ref(l->m);
          l->handles++;
          if (l->handles >= 2)
            FZ_ASSERT(!cube__memory_can_mut(l->m), "two handles, yet can_mut");
        }
        break;
      }
      case 7: /* cleanup */
        cube__mm_cleanup(mm, (op & 0x80) != 0);
        break;
      case 8: { /* mode */
        cube_allocation_mode_t mode = (op & 0x80) ? CUBE_ALLOCATION_PERSISTENT : CUBE_ALLOCATION_AUTO;
        cube__mm_set_mode(mm, mode);
        cube_allocation_mode_t now = cube__mm_mode(mm);
        if (o.persistent == CUBE__PERSISTENT_ENABLED)
          FZ_ASSERT(now == mode, "mode not switched");
        else if (o.persistent == CUBE__PERSISTENT_DISABLED)
          FZ_ASSERT(now == CUBE_ALLOCATION_AUTO, "disabled policy left Auto");
        else
          FZ_ASSERT(now == CUBE_ALLOCATION_PERSISTENT, "enforced policy left Persistent");
        break;
      }
      case 9: { /* storage failures */
        uint8_t b = fz_u8(&f);
        if (b & 0x80) fs.limit = (uint64_t)(b & 0x7F) * MiB;
        else if (b & 0x40) fs.fail_other = b & 3;
        else fs.fail_next = b & 7;
        break;
      }
      case 10: { /* report agrees with usage */
        cube_memory_report_t rep = {0};
        cube_memory_usage_t u;
        cube__mm_report(mm, &rep);
        cube__mm_usage(mm, &u);
        FZ_ASSERT(rep.pool_count >= 2 && rep.pool_count <= CUBE_MAX_POOLS, "pool count %u",
                  rep.pool_count);
        FZ_ASSERT(rep.total.bytes_in_use == u.bytes_in_use &&
                      rep.total.number_allocs == u.number_allocs &&
                      rep.total.bytes_reserved == u.bytes_reserved,
                  "report total differs from usage");
        char line[256];
        cube_memory_usage_format(&u, line, sizeof(line));
        break;
      }
      default: /* the end-of-op check alone */
        break;
    }
    check(mm, &md, &fs);
  }

  /* Teardown: either drop everything then destroy, or destroy first (bound
   * descriptors are detached and stop resolving) and drop afterwards. */
  if (c1 & 1) {
    cube__mm_destroy(mm);
    for (size_t i = 0; i < md.count; ++i)
      FZ_ASSERT(!cube__memory_resolve(md.live[i].m, NULL, NULL, NULL),
                "a descriptor resolves after its manager was destroyed");
    while (md.count) drop_ref(&md, md.count - 1, false);
  } else {
    while (md.count) drop_ref(&md, md.count - 1, false);
    check(mm, &md, &fs);
    cube__mm_destroy(mm);
  }
  FZ_ASSERT(fs.allocs == fs.deallocs && fs.live_bytes == 0,
            "storage leaked: %" PRIu64 " allocs, %" PRIu64 " deallocs, %" PRIu64 " bytes live",
            fs.allocs, fs.deallocs, fs.live_bytes);
  return 0;
}
