// The two levers of the training step that tch does not expose (docs/design.md §7): CPU
// autocast (tch's `autocast` switches the CUDA one only) and the channels-last memory format
// (tch's `contiguous` knows only the default one). build.rs compiles this file against the
// libtorch headers torch-sys uses; tensors are tch's C tensors (at::Tensor *).
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>

#include <cstring>
#include <exception>

extern "C" {

// Enters CPU autocast in scalar type `dtype` (c10::ScalarType as an integer) on this thread.
// Returns whether it was enabled before (pass it to aiperf_cpu_autocast_exit), or -1 when
// libtorch threw.
int aiperf_cpu_autocast_enter(int8_t dtype) {
  try {
    bool was = at::autocast::is_autocast_enabled(at::kCPU);
    at::autocast::set_autocast_dtype(at::kCPU, static_cast<at::ScalarType>(dtype));
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::increment_nesting();
    return was ? 1 : 0;
  } catch (const std::exception &) {
    return -1;
  }
}

// Leaves CPU autocast: restores the state before the matching enter, and drops the cached
// casts of the parameters when the outermost autocast region ends (as torch.autocast does).
void aiperf_cpu_autocast_exit(int was) {
  if (at::autocast::decrement_nesting() == 0) {
    at::autocast::clear_cache();
  }
  at::autocast::set_autocast_enabled(at::kCPU, was == 1);
}

// Whether CPU autocast is on for this thread, and its scalar type (for tests).
int aiperf_cpu_autocast_state(int8_t *dtype) {
  *dtype = static_cast<int8_t>(at::autocast::get_autocast_dtype(at::kCPU));
  return at::autocast::is_autocast_enabled(at::kCPU) ? 1 : 0;
}

// `t` in the channels-last layout (itself when it already is): a new tensor in *out, or 0
// with a message in *error (free it with free()). Four-dimensional tensors only.
int aiperf_channels_last(void *t, void **out, char **error) {
  try {
    const auto &x = *static_cast<const at::Tensor *>(t);
    *out = new at::Tensor(x.contiguous(at::MemoryFormat::ChannelsLast));
    return 1;
  } catch (const std::exception &e) {
    *error = strdup(e.what());
    return 0;
  }
}

// Whether `t` is dense in the channels-last layout.
int aiperf_is_channels_last(void *t) {
  const auto &x = *static_cast<const at::Tensor *>(t);
  return x.dim() == 4 && x.is_contiguous(at::MemoryFormat::ChannelsLast) ? 1 : 0;
}

}  // extern "C"
