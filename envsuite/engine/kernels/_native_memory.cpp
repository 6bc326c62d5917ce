// Memory for panels (pack_panels): arenas of anonymous memory, 2 MB-aligned and advised for transparent
// huge pages before anything touches them, handed out in order.
//
// A decode step streams every weight once; on 4 KB pages that is a TLB miss every 4 KB. Measured on the
// AMD EPYC box (the products of SmolLM2's step at one row, panels): 8.9 ms on 4 KB pages, 7.5 ms on huge
// pages. Advice on memory that was touched before has no effect until khugepaged gets to it: when each
// panel tensor took posix_memalign's memory, malloc's heap handed back pages freed by the model's
// loading, and a loaded SmolLM2 held only 2 of its 66 MB of q/k/v panels, none of its 106 MB of down
// panels and none of its o panels on huge pages (only the tensors above malloc's mmap threshold were
// fresh). Arenas are always fresh mappings, so every panel tensor but the last pages of an arena sits on
// huge pages (when the kernel has free ones), small ones included, and a model's panels lie one after
// another in the order they were packed (a step's products then read one long stream).
//
// An arena is unmapped when it is no longer the open one and its last tensor is freed; the open arena
// is unmapped too when its last tensor goes (it does not linger between models). Tensors of ARENA_BYTES
// or more get an arena each.
#include <sys/mman.h>

#include <mutex>

#include "_native.h"

namespace envsuite {
namespace {

constexpr size_t HUGE_PAGE = size_t(2) << 20;
constexpr size_t ARENA_BYTES = size_t(64) << 20;
constexpr size_t ALIGNMENT = 4096;  // each tensor starts on its own page
constexpr size_t SMALLEST = size_t(64) << 10;  // smaller tensors take torch's allocator

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

struct Arena {
  char* base;
  size_t size;
  size_t used = 0;
  int64_t tensors = 0;  // live tensors in it
};

std::mutex arenas_mutex;    // guards open_arena and every Arena's used and tensors
Arena* open_arena = nullptr;

// A fresh mapping of `size` bytes (a multiple of HUGE_PAGE) at a HUGE_PAGE boundary, advised; null if the
// system refuses it.
Arena* map_arena(size_t size) {
  void* raw = mmap(nullptr, size + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  char* start = reinterpret_cast<char*>(round_up(reinterpret_cast<uintptr_t>(raw), HUGE_PAGE));
  char* end = start + size;
  if (start > static_cast<char*>(raw)) munmap(raw, start - static_cast<char*>(raw));
  if (static_cast<char*>(raw) + size + HUGE_PAGE > end) munmap(end, static_cast<char*>(raw) + size + HUGE_PAGE - end);
  madvise(start, size, MADV_HUGEPAGE);  // honoured under the "always" and "madvise" settings
  return new Arena{start, size};
}

// Under the mutex: unmap `arena` if nothing lives in it and no one will allocate from it.
void release_if_idle(Arena* arena) {
  if (arena->tensors != 0) return;
  if (arena == open_arena) open_arena = nullptr;
  munmap(arena->base, arena->size);
  delete arena;
}

}  // namespace

at::Tensor empty_huge(at::IntArrayRef sizes, const at::TensorOptions& options) {
  const size_t bytes = size_t(c10::multiply_integers(sizes)) * options.dtype().itemsize();
  if (bytes < SMALLEST) return at::empty(sizes, options);
  const size_t taken = round_up(bytes, ALIGNMENT);
  std::lock_guard<std::mutex> lock(arenas_mutex);
  Arena* arena = nullptr;
  if (taken >= ARENA_BYTES) {
    arena = map_arena(round_up(taken, HUGE_PAGE));  // its own, never the open one
  } else {
    // A full open arena holds tensors (an empty one is unmapped when its last tensor goes): its last
    // tensor's deleter unmaps it once it is no longer the open one.
    if (open_arena == nullptr || open_arena->used + taken > open_arena->size) open_arena = map_arena(ARENA_BYTES);
    arena = open_arena;
  }
  if (arena == nullptr) return at::empty(sizes, options);
  void* memory = arena->base + arena->used;
  arena->used += taken;
  arena->tensors += 1;
  return at::from_blob(
      memory, sizes,
      [arena](void*) {
        std::lock_guard<std::mutex> lock(arenas_mutex);
        arena->tensors -= 1;
        release_if_idle(arena);
      },
      options);
}

}  // namespace envsuite
