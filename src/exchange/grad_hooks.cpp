// Autograd hooks for the exchange's overlap with backward: tch does not expose
// them, so this shim, compiled by build.rs against the libtorch headers torch-sys uses,
// adds to each parameter's gradient accumulator a post hook — DDP's reducer does the same —
// that tells Rust "parameter i's gradient is complete" the moment autograd has accumulated
// it. The accumulators are held here while the hooks are wanted: a parameter keeps only a
// weak reference to its accumulator, which would otherwise be rebuilt, hookless, by the
// next backward.
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/node.h>
#include <torch/csrc/autograd/variable.h>

#include <cstring>
#include <exception>
#include <memory>
#include <vector>

namespace {

using ready_fn = void (*)(void *ctx, int64_t index);

struct ReadyHook : torch::autograd::FunctionPostHook {
  ReadyHook(ready_fn fn, void *ctx, int64_t index) : fn_(fn), ctx_(ctx), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list &outputs,
                                            const torch::autograd::variable_list &) override {
    fn_(ctx_, index_);
    return outputs;
  }
  ready_fn fn_;
  void *ctx_;
  int64_t index_;
};

}  // namespace

struct aiperf_grad_hooks {
  std::vector<c10::intrusive_ptr<torch::autograd::Node>> accumulators;
  std::vector<uintptr_t> keys;
};

extern "C" {

// `tensors` are tch's C tensors (torch::Tensor *), leaves that require grad. Returns the
// hooks, or NULL with a message in *error (free it with free()).
aiperf_grad_hooks *aiperf_grad_hooks_add(void *const *tensors, int64_t n, ready_fn fn,
                                         void *ctx, char **error) {
  try {
    auto hooks = std::make_unique<aiperf_grad_hooks>();
    for (int64_t i = 0; i < n; ++i) {
      const auto &t = *static_cast<const at::Tensor *>(tensors[i]);
      auto acc = torch::autograd::impl::grad_accumulator(t);
      if (!acc) {
        *error = strdup("a parameter without a gradient accumulator (not a leaf that requires grad)");
        return nullptr;
      }
      hooks->keys.push_back(acc->add_post_hook(std::make_unique<ReadyHook>(fn, ctx, i)));
      hooks->accumulators.push_back(std::move(acc));
    }
    return hooks.release();
  } catch (const std::exception &e) {
    *error = strdup(e.what());
    return nullptr;
  }
}

// Removes the hooks and lets the accumulators go.
void aiperf_grad_hooks_remove(aiperf_grad_hooks *hooks) {
  if (hooks == nullptr) return;
  for (size_t i = 0; i < hooks->accumulators.size(); ++i) {
    hooks->accumulators[i]->del_post_hook(hooks->keys[i]);
  }
  delete hooks;
}

}  // extern "C"
