#pragma once
/// \file
/// Storage for long-lived streams of bytes that decode reads end to end (a KV cache).
///
///     huge_page_allocator<T>   a standard allocator: blocks of huge_page_bytes or more
///                              start on a 2 MiB boundary and, on Linux, are advised as
///                              transparent huge pages (madvise MADV_HUGEPAGE); smaller
///                              blocks come from operator new
///
/// Why: a decode step reads every cached K and V row once, one 4 KiB page after another
/// ([tokens, kv_heads, d] rows of 4 KiB at 8 heads x 128 floats), so with 4 KiB pages each
/// row costs a TLB miss (a two-level walk under a hypervisor) and each page restarts the
/// hardware prefetcher. On hosts whose THP mode is `madvise` (Debian's and Ubuntu's
/// default) memory is only backed by 2 MiB pages when asked for; where THP is `never` the
/// advice is a no-op, and the storage is the same bytes either way.

#include <cstddef>
#include <cstdlib>
#if defined(_MSC_VER)
#include <malloc.h>
#endif
#include <limits>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace posenc {

/// Blocks from this size up are 2 MiB aligned and advised as huge pages.
inline constexpr std::size_t huge_page_bytes = std::size_t(2) << 20;

/// A standard allocator (stateless; all instances equal) for large contiguous buffers:
/// see the file comment. The rule that picks the path depends on the block's size only,
/// so deallocate(p, n) frees the way allocate(n) allocated.
template <class T>
struct huge_page_allocator {
  using value_type = T;

  huge_page_allocator() noexcept = default;
  template <class U>
  huge_page_allocator(const huge_page_allocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    // room for the size in bytes and for its rounding up to whole huge pages
    if (n > (std::numeric_limits<std::size_t>::max() - huge_page_bytes) / sizeof(T))
      throw std::bad_alloc();
    const std::size_t bytes = n * sizeof(T);
    if (!is_huge(bytes)) return static_cast<T*>(::operator new(bytes));
    // aligned_alloc wants a multiple of the alignment; the tail of the last page is unused
    const std::size_t rounded = (bytes + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes;
#if defined(_MSC_VER)
    void* p = _aligned_malloc(rounded, huge_page_bytes);  // MSVC has no std::aligned_alloc
#else
    void* p = std::aligned_alloc(huge_page_bytes, rounded);
#endif
    if (!p) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    // advice only: a kernel without THP, or with it off, says no and the pages stay 4 KiB
    static_cast<void>(::madvise(p, rounded, MADV_HUGEPAGE));
#endif
    return static_cast<T*>(p);
  }

  void deallocate(T* p, std::size_t n) noexcept {
    if (is_huge(n * sizeof(T)))
#if defined(_MSC_VER)
      _aligned_free(p);
#else
      std::free(p);
#endif
    else
      ::operator delete(p);
  }

  template <class U>
  bool operator==(const huge_page_allocator<U>&) const noexcept {
    return true;
  }
  template <class U>
  bool operator!=(const huge_page_allocator<U>&) const noexcept {
    return false;
  }

 private:
  static bool is_huge(std::size_t bytes) noexcept { return bytes >= huge_page_bytes; }
};

}  // namespace posenc
