// What libtorch knows about the arithmetic it will do (docs/design.md §6, the platform in the
// seal): the vector level ATen's CPU kernels dispatch to, the BLAS and oneDNN versions, and
// its whole build configuration. tch does not expose them; build.rs compiles this file against
// the libtorch headers torch-sys uses.
#include <ATen/Version.h>

#include <cstring>
#include <exception>
#include <string>

// Copies text `what` (0: CPU capability, 1: MKL version, 2: oneDNN version, 3: the build
// configuration) into `buf` (`len` bytes, NUL-terminated, truncated); returns its full length,
// or -1 when libtorch threw.
extern "C" long aiperf_torch_info(int what, char *buf, size_t len) {
  try {
    std::string s;
    switch (what) {
    case 0:
      s = at::get_cpu_capability();
      break;
    case 1:
      s = at::get_mkl_version();
      break;
    case 2:
      s = at::get_mkldnn_version();
      break;
    default:
      s = at::show_config();
    }
    if (len > 0) {
      size_t n = s.size() < len - 1 ? s.size() : len - 1;
      std::memcpy(buf, s.data(), n);
      buf[n] = 0;
    }
    return static_cast<long>(s.size());
  } catch (const std::exception &) {
    return -1;
  }
}
