// process_group_xcoll.cpp - a torch.distributed backend ("xcoll") over
// xcoll's C API, for the ProcessGroup interface of PyTorch 1.13
// (torch/csrc/distributed/c10d/ProcessGroup.hpp of Debian's libtorch-dev).
//
// Each process group is one xcoll world communicator whose ranks meet
// through the c10d Store that torch hands the backend's creator (a
// PrefixStore per group): xcoll_comm_init_kv forwards xcoll's rendezvous
// keys to it, so no second store or port is needed. XCOLL_BACKEND picks
// tcp, ucx or nccl_like underneath.
//
// Every collective is issued with xcoll's non-blocking call and returns a
// WorkXcoll holding the xcoll request. The request is waited on exactly
// once, by whoever gets there first: Work::wait (xcoll_wait), isCompleted
// (xcoll_test, then xcoll_wait once done), or the group's completion thread,
// which waits on the requests in issue order so that futures (DDP's
// allreduce hook waits on Work::getFuture) complete without anybody calling
// wait. Tensors must be on the CPU; a non-contiguous one is staged through a
// contiguous copy.
#include <ATen/ATen.h>
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "xcoll.h"
}

namespace xcoll_torch {

namespace {

const char *const kSupported =
    "allreduce (sum, avg, min, max, product, band, bor, bxor, premul_sum), "
    "broadcast, allgather, "
    "_allgather_base, reduce_scatter, _reduce_scatter_base, reduce, barrier";

[[noreturn]] void unsupported(const char *call) {
  TORCH_CHECK(false, "xcoll backend: ", call,
              " is not supported (supported: ", kSupported, ")");
}

xcoll_datatype to_xcoll_dtype(const at::Tensor &t, const char *call) {
  switch (t.scalar_type()) {
  case at::kFloat:
    return XCOLL_FLOAT32;
  case at::kDouble:
    return XCOLL_FLOAT64;
  case at::kHalf:
    return XCOLL_FLOAT16;
  case at::kBFloat16:
    return XCOLL_BFLOAT16;
  case at::kChar:
    return XCOLL_INT8;
  case at::kByte:
    return XCOLL_UINT8;
  case at::kInt:
    return XCOLL_INT32;
  case at::kLong:
    return XCOLL_INT64;
  default:
    TORCH_CHECK(false, "xcoll backend: ", call, ": tensors of type ",
                t.scalar_type(),
                " are not supported (float32, float64, float16, bfloat16, "
                "int8, uint8, int32, int64 are)");
  }
}

// The xcoll_op of a c10d::ReduceOp applied to tensor (of xcoll type dtype)
// on comm, for one call. PREMUL_SUM (torch.distributed's
// _make_nccl_premul_sum) becomes a premul sum of comm
// (xcoll_op_create_premul_sum) with the factor converted to the tensor's
// type, destroyed with this object: xcoll multiplies when the call is made,
// so the op may go as soon as the call has returned (NCCL's rule, which
// ProcessGroupNCCL's ncclRedOpRAII relies on too).
class ReduceOpScope {
public:
  ReduceOpScope(const c10d::ReduceOp &op, const at::Tensor &tensor,
                xcoll_datatype dtype, xcoll_comm_t comm, const char *call)
      : comm_(comm) {
    static const struct {
      c10d::ReduceOp::RedOpType torch_op;
      xcoll_op op;
    } built_in[] = {{c10d::ReduceOp::SUM, XCOLL_SUM},
                    {c10d::ReduceOp::AVG, XCOLL_AVG},
                    {c10d::ReduceOp::PRODUCT, XCOLL_PROD},
                    {c10d::ReduceOp::MIN, XCOLL_MIN},
                    {c10d::ReduceOp::MAX, XCOLL_MAX},
                    {c10d::ReduceOp::BAND, XCOLL_BAND},
                    {c10d::ReduceOp::BOR, XCOLL_BOR},
                    {c10d::ReduceOp::BXOR, XCOLL_BXOR}};
    for (const auto &entry : built_in) {
      if (op.op_ == entry.torch_op) {
        op_ = entry.op;
        return;
      }
    }
    TORCH_CHECK(op.op_ == c10d::ReduceOp::PREMUL_SUM, "xcoll backend: ", call,
                ": reduce op ", static_cast<int>(op.op_),
                " is not supported (SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, "
                "BXOR, PREMUL_SUM are)");
    create_premul_sum(op, tensor, dtype, call);
  }
  ~ReduceOpScope() {
    if (owned_)
      xcoll_op_destroy(op_, comm_);
  }
  ReduceOpScope(const ReduceOpScope &) = delete;
  ReduceOpScope &operator=(const ReduceOpScope &) = delete;

  xcoll_op get() const { return op_; }

private:
  void create_premul_sum(const c10d::ReduceOp &op, const at::Tensor &tensor,
                         xcoll_datatype dtype, const char *call) {
    const auto *supplement =
        dynamic_cast<const c10d::NCCLPreMulSumSupplement *>(
            op.supplement_.get());
    TORCH_CHECK(supplement != nullptr, "xcoll backend: ", call,
                ": PREMUL_SUM without its factor (make the op with "
                "torch.distributed._make_nccl_premul_sum)");
    // The factor, as one element of the tensor's type in host memory.
    at::Tensor scalar =
        supplement->tensor_factors.empty()
            ? at::full({}, supplement->double_factor,
                       at::TensorOptions().dtype(tensor.scalar_type()))
            : supplement->tensor_factors[0]
                  .reshape({-1})
                  .narrow(0, 0, 1)
                  .to(at::kCPU, tensor.scalar_type())
                  .contiguous();
    xcoll_status status = xcoll_op_create_premul_sum(
        &op_, scalar.data_ptr(), dtype, XCOLL_SCALAR_HOST, comm_);
    TORCH_CHECK(status == XCOLL_SUCCESS, "xcoll backend: ", call,
                ": PREMUL_SUM: ", xcoll_strerror(status), ": ",
                xcoll_comm_last_error(comm_));
    owned_ = true;
  }

  xcoll_comm_t comm_;
  xcoll_op op_ = XCOLL_SUM;
  bool owned_ = false;
};

void check_cpu(const at::Tensor &t, const char *call) {
  TORCH_CHECK(t.device().is_cpu(), "xcoll backend: ", call,
              ": tensors must be on the CPU (got ", t.device(), ")");
}

at::Tensor single_tensor(std::vector<at::Tensor> &tensors, const char *call) {
  TORCH_CHECK(tensors.size() == 1, "xcoll backend: ", call,
              " takes one tensor per process (got ", tensors.size(), ")");
  check_cpu(tensors[0], call);
  return tensors[0];
}

// ---- the caller's store, as xcoll_kv_store sees it ----

// Forwards xcoll's rendezvous keys to the c10d Store of the group.
// Exceptions stop here: xcoll is C. The text of the last one is kept for the
// constructor's message.
struct StoreBridge {
  c10::intrusive_ptr<c10d::Store> store;
  std::string last_error;

  static xcoll_status fail(StoreBridge *self, const std::exception &e) {
    self->last_error = e.what();
    return self->last_error.find("imeout") != std::string::npos
               ? XCOLL_ERR_TIMEOUT
               : XCOLL_ERR_REMOTE;
  }

  static xcoll_status set(void *context, const char *key, const void *value,
                          size_t bytes) {
    auto *self = static_cast<StoreBridge *>(context);
    try {
      const auto *p = static_cast<const uint8_t *>(value);
      self->store->set(key, std::vector<uint8_t>(p, p + bytes));
      return XCOLL_SUCCESS;
    } catch (const std::exception &e) {
      return fail(self, e);
    }
  }

  static xcoll_status get(void *context, const char *key, double timeout_s,
                          void **value, size_t *bytes) {
    auto *self = static_cast<StoreBridge *>(context);
    try {
      self->store->wait({key}, std::chrono::milliseconds(
                                   static_cast<int64_t>(timeout_s * 1000)));
      std::vector<uint8_t> data = self->store->get(key);
      void *copy = std::malloc(data.empty() ? 1 : data.size());
      if (copy == nullptr)
        return XCOLL_ERR_NO_MEMORY;
      if (!data.empty())
        std::memcpy(copy, data.data(), data.size());
      *value = copy;
      *bytes = data.size();
      return XCOLL_SUCCESS;
    } catch (const std::exception &e) {
      return fail(self, e);
    }
  }

  static xcoll_status add(void *context, const char *key, int64_t delta,
                          int64_t *result) {
    auto *self = static_cast<StoreBridge *>(context);
    try {
      *result = self->store->add(key, delta);
      return XCOLL_SUCCESS;
    } catch (const std::exception &e) {
      return fail(self, e);
    }
  }
};

} // namespace

// ---- work ----

class WorkXcoll : public c10d::Work {
public:
  // request: from an xcoll_i* call on comm. outputs: what the future holds.
  // keep: tensors that must live until the operation ends. after: run once
  // the operation succeeded (copy staged results to their tensors).
  WorkXcoll(int rank, c10d::OpType type, const char *call, xcoll_comm_t comm,
            xcoll_request_t request, std::vector<at::Tensor> outputs,
            std::vector<at::Tensor> keep, std::function<void()> after)
      : Work(rank, type), call_(call), comm_(comm), request_(request),
        outputs_(std::move(outputs)), keep_(std::move(keep)),
        after_(std::move(after)),
        future_(c10::make_intrusive<at::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {}

  ~WorkXcoll() override {
    complete_blocking();
  }

  bool isCompleted() override {
    std::unique_lock<std::mutex> lock(request_lock_, std::try_to_lock);
    if (lock.owns_lock() && request_ != nullptr) {
      int done = 0;
      xcoll_status status = xcoll_test(request_, &done);
      if (done || status != XCOLL_SUCCESS)
        complete_locked();
    }
    std::lock_guard<std::mutex> guard(mutex_);
    return completed_;
  }

  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override {
    if (timeout == kNoTimeout)
      complete_blocking();
    return Work::wait(timeout);
  }

  std::vector<at::Tensor> result() override {
    return outputs_;
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    return future_;
  }

  // xcoll_wait on the request unless someone did already, then finish.
  void complete_blocking() {
    std::lock_guard<std::mutex> lock(request_lock_);
    complete_locked();
  }

private:
  // With request_lock_ held: the one place that waits on the request.
  void complete_locked() {
    if (request_ == nullptr)
      return;
    xcoll_status status = xcoll_wait(request_);
    request_ = nullptr;
    std::exception_ptr error;
    if (status == XCOLL_SUCCESS) {
      try {
        if (after_)
          after_();
      } catch (...) {
        error = std::current_exception();
      }
    } else {
      error = std::make_exception_ptr(std::runtime_error(
          std::string("xcoll backend: ") + call_ + " failed: " +
          xcoll_strerror(status) + ": " + xcoll_comm_last_error(comm_)));
    }
    keep_.clear();
    after_ = nullptr;
    finish(error);
    if (error)
      future_->setError(error);
    else
      future_->markCompleted(c10::IValue(outputs_));
  }

  const char *call_;
  xcoll_comm_t comm_;
  std::mutex request_lock_;
  xcoll_request_t request_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keep_;
  std::function<void()> after_;
  c10::intrusive_ptr<at::ivalue::Future> future_;
};

// ---- the process group ----

class ProcessGroupXcoll : public c10d::ProcessGroup {
public:
  ProcessGroupXcoll(const c10::intrusive_ptr<c10d::Store> &store, int rank,
                    int size, std::chrono::milliseconds timeout)
      : ProcessGroup(rank, size) {
    bridge_.store = store;
    xcoll_kv_store kv = {&bridge_, &StoreBridge::set, &StoreBridge::get,
                         &StoreBridge::add};
    xcoll_config config;
    xcoll_config_init(&config);
    config.rank = rank;
    config.world_size = size;
    config.master_addr = std::getenv("MASTER_ADDR");
    // XCOLL_TIMEOUT_S, when set, wins over the group's timeout.
    config.timeout_s = std::getenv("XCOLL_TIMEOUT_S") != nullptr
                           ? 0.0
                           : static_cast<double>(timeout.count()) / 1000.0;
    xcoll_status status = xcoll_comm_init_kv(&comm_, &config, &kv);
    TORCH_CHECK(
        status == XCOLL_SUCCESS, "xcoll backend: rank ", rank, " of ", size,
        " could not create its communicator: ", xcoll_strerror(status), ": ",
        xcoll_last_error(),
        bridge_.last_error.empty() ? "" : " (store: ", bridge_.last_error,
        bridge_.last_error.empty() ? "" : ")");
    completer_ = std::thread([this] { completer_main(); });
  }

  ~ProcessGroupXcoll() override {
    {
      std::lock_guard<std::mutex> lock(queue_lock_);
      stopping_ = true;
    }
    queue_cond_.notify_all();
    completer_.join();
    xcoll_comm_destroy(comm_);
  }

  const std::string getBackendName() const override {
    return "xcoll";
  }

  // The name of the xcoll backend underneath (tcp, ucx, nccl_like).
  std::string transport() const {
    return xcoll_comm_backend(comm_);
  }

  c10::intrusive_ptr<c10d::Work>
  allreduce(std::vector<at::Tensor> &tensors,
            const c10d::AllreduceOptions &opts) override {
    const char *call = "allreduce";
    at::Tensor tensor = single_tensor(tensors, call);
    xcoll_datatype dtype = to_xcoll_dtype(tensor, call);
    ReduceOpScope op(opts.reduceOp, tensor, dtype, comm_, call);
    at::Tensor work = tensor.contiguous();
    xcoll_request_t request = nullptr;
    check(call, xcoll_iallreduce(work.data_ptr(), work.data_ptr(), work.numel(),
                                 dtype, op.get(), comm_, nullptr, &request));
    return enqueue(c10d::OpType::ALLREDUCE, call, request, {tensor}, {work},
                   copy_back(work, tensor));
  }

  c10::intrusive_ptr<c10d::Work>
  broadcast(std::vector<at::Tensor> &tensors,
            const c10d::BroadcastOptions &opts) override {
    const char *call = "broadcast";
    at::Tensor tensor = single_tensor(tensors, call);
    check_root(call, opts.rootRank);
    xcoll_datatype dtype = to_xcoll_dtype(tensor, call);
    at::Tensor work = tensor.contiguous();
    xcoll_request_t request = nullptr;
    check(call, xcoll_ibroadcast(work.data_ptr(), work.data_ptr(), work.numel(),
                                 dtype, static_cast<int>(opts.rootRank), comm_,
                                 nullptr, &request));
    return enqueue(c10d::OpType::BROADCAST, call, request, {tensor}, {work},
                   copy_back(work, tensor));
  }

  c10::intrusive_ptr<c10d::Work>
  reduce(std::vector<at::Tensor> &tensors,
         const c10d::ReduceOptions &opts) override {
    const char *call = "reduce";
    at::Tensor tensor = single_tensor(tensors, call);
    check_root(call, opts.rootRank);
    xcoll_datatype dtype = to_xcoll_dtype(tensor, call);
    ReduceOpScope op(opts.reduceOp, tensor, dtype, comm_, call);
    at::Tensor work = tensor.contiguous();
    xcoll_request_t request = nullptr;
    check(call, xcoll_ireduce(work.data_ptr(), work.data_ptr(), work.numel(),
                              dtype, op.get(), static_cast<int>(opts.rootRank), comm_,
                              nullptr, &request));
    return enqueue(c10d::OpType::REDUCE, call, request, {tensor}, {work},
                   copy_back(work, tensor));
  }

  c10::intrusive_ptr<c10d::Work>
  allgather(std::vector<std::vector<at::Tensor>> &outputs,
            std::vector<at::Tensor> &inputs,
            const c10d::AllgatherOptions &) override {
    const char *call = "allgather";
    at::Tensor input = single_tensor(inputs, call);
    TORCH_CHECK(outputs.size() == 1 &&
                    outputs[0].size() == static_cast<size_t>(size_),
                "xcoll backend: allgather wants one list of ", size_,
                " output tensors");
    for (const at::Tensor &out : outputs[0]) {
      check_cpu(out, call);
      TORCH_CHECK(out.numel() == input.numel() &&
                      out.scalar_type() == input.scalar_type(),
                  "xcoll backend: allgather: every output tensor must have "
                  "the input's size and type");
    }
    xcoll_datatype dtype = to_xcoll_dtype(input, call);
    at::Tensor send = input.contiguous();
    at::Tensor gathered = at::empty({size_ * input.numel()}, input.options());
    xcoll_request_t request = nullptr;
    check(call,
          xcoll_iallgather(send.data_ptr(), gathered.data_ptr(), send.numel(),
                           dtype, comm_, nullptr, &request));
    std::vector<at::Tensor> targets = outputs[0];
    int64_t n = input.numel();
    auto scatter_out = [gathered, targets, n]() {
      for (size_t r = 0; r < targets.size(); r++)
        targets[r].copy_(gathered.narrow(0, static_cast<int64_t>(r) * n, n)
                             .view(targets[r].sizes()));
    };
    return enqueue(c10d::OpType::ALLGATHER, call, request, targets,
                   {send, gathered}, scatter_out);
  }

  c10::intrusive_ptr<c10d::Work>
  _allgather_base(at::Tensor &output, at::Tensor &input,
                  const c10d::AllgatherOptions &) override {
    const char *call = "_allgather_base";
    check_cpu(input, call);
    check_cpu(output, call);
    TORCH_CHECK(output.numel() == size_ * input.numel() &&
                    output.scalar_type() == input.scalar_type(),
                "xcoll backend: _allgather_base: the output must hold "
                "world_size (",
                size_,
                ") times the input's elements, of "
                "its type");
    xcoll_datatype dtype = to_xcoll_dtype(input, call);
    at::Tensor send = input.contiguous();
    at::Tensor work = output.contiguous();
    xcoll_request_t request = nullptr;
    check(call, xcoll_iallgather(send.data_ptr(), work.data_ptr(), send.numel(),
                                 dtype, comm_, nullptr, &request));
    return enqueue(c10d::OpType::_ALLGATHER_BASE, call, request, {output},
                   {send, work}, copy_back(work, output));
  }

  c10::intrusive_ptr<c10d::Work>
  reduce_scatter(std::vector<at::Tensor> &outputs,
                 std::vector<std::vector<at::Tensor>> &inputs,
                 const c10d::ReduceScatterOptions &opts) override {
    const char *call = "reduce_scatter";
    at::Tensor output = single_tensor(outputs, call);
    TORCH_CHECK(inputs.size() == 1 &&
                    inputs[0].size() == static_cast<size_t>(size_),
                "xcoll backend: reduce_scatter wants one list of ", size_,
                " input tensors");
    for (const at::Tensor &in : inputs[0]) {
      check_cpu(in, call);
      TORCH_CHECK(in.numel() == output.numel() &&
                      in.scalar_type() == output.scalar_type(),
                  "xcoll backend: reduce_scatter: every input tensor must "
                  "have the output's size and type");
    }
    xcoll_datatype dtype = to_xcoll_dtype(output, call);
    ReduceOpScope op(opts.reduceOp, output, dtype, comm_, call);
    std::vector<at::Tensor> flat;
    for (const at::Tensor &in : inputs[0])
      flat.push_back(in.reshape({-1}));
    at::Tensor send = at::cat(flat);
    at::Tensor work = output.contiguous();
    xcoll_request_t request = nullptr;
    check(call,
          xcoll_ireduce_scatter(send.data_ptr(), work.data_ptr(), work.numel(),
                                dtype, op.get(), comm_, nullptr, &request));
    return enqueue(c10d::OpType::REDUCE_SCATTER, call, request, {output},
                   {send, work}, copy_back(work, output));
  }

  c10::intrusive_ptr<c10d::Work>
  _reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                       const c10d::ReduceScatterOptions &opts) override {
    const char *call = "_reduce_scatter_base";
    check_cpu(input, call);
    check_cpu(output, call);
    TORCH_CHECK(input.numel() == size_ * output.numel() &&
                    output.scalar_type() == input.scalar_type(),
                "xcoll backend: _reduce_scatter_base: the input must hold "
                "world_size (",
                size_,
                ") times the output's elements, of "
                "its type");
    xcoll_datatype dtype = to_xcoll_dtype(output, call);
    ReduceOpScope op(opts.reduceOp, output, dtype, comm_, call);
    at::Tensor send = input.contiguous();
    at::Tensor work = output.contiguous();
    xcoll_request_t request = nullptr;
    check(call,
          xcoll_ireduce_scatter(send.data_ptr(), work.data_ptr(), work.numel(),
                                dtype, op.get(), comm_, nullptr, &request));
    return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, call, request, {output},
                   {send, work}, copy_back(work, output));
  }

  c10::intrusive_ptr<c10d::Work>
  barrier(const c10d::BarrierOptions &) override {
    xcoll_request_t request = nullptr;
    check("barrier", xcoll_ibarrier(comm_, &request));
    return enqueue(c10d::OpType::BARRIER, "barrier", request, {}, {}, nullptr);
  }

  // What this backend does not offer: a clear error naming the call.
  c10::intrusive_ptr<c10d::Work>
  allreduce_coalesced(std::vector<at::Tensor> &,
                      const c10d::AllreduceCoalescedOptions &) override {
    unsupported("allreduce_coalesced");
  }
  c10::intrusive_ptr<c10d::Work>
  allgather_coalesced(std::vector<std::vector<at::Tensor>> &,
                      std::vector<at::Tensor> &,
                      const c10d::AllgatherOptions &) override {
    unsupported("allgather_coalesced");
  }
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>> &,
                                        std::vector<at::Tensor> &,
                                        const c10d::GatherOptions &) override {
    unsupported("gather");
  }
  c10::intrusive_ptr<c10d::Work>
  scatter(std::vector<at::Tensor> &, std::vector<std::vector<at::Tensor>> &,
          const c10d::ScatterOptions &) override {
    unsupported("scatter");
  }
  c10::intrusive_ptr<c10d::Work>
  alltoall_base(at::Tensor &, at::Tensor &, std::vector<int64_t> &,
                std::vector<int64_t> &,
                const c10d::AllToAllOptions &) override {
    unsupported("alltoall_base (all_to_all_single)");
  }
  c10::intrusive_ptr<c10d::Work>
  alltoall(std::vector<at::Tensor> &, std::vector<at::Tensor> &,
           const c10d::AllToAllOptions &) override {
    unsupported("alltoall");
  }
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &, int,
                                      int) override {
    unsupported("send");
  }
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &, int,
                                      int) override {
    unsupported("recv");
  }
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor> &,
                                               int) override {
    unsupported("recvAnysource");
  }

private:
  void check(const char *call, xcoll_status status) {
    TORCH_CHECK(status == XCOLL_SUCCESS, "xcoll backend: ", call, ": ",
                xcoll_strerror(status), ": ", xcoll_comm_last_error(comm_));
  }

  void check_root(const char *call, int64_t root) {
    TORCH_CHECK(root >= 0 && root < size_, "xcoll backend: ", call, ": root ",
                root, " is outside [0, ", size_, ")");
  }

  // When work is a contiguous copy of tensor, copy the result back.
  static std::function<void()> copy_back(const at::Tensor &work,
                                         const at::Tensor &tensor) {
    if (work.data_ptr() == tensor.data_ptr())
      return nullptr;
    return [work, tensor]() mutable { tensor.copy_(work); };
  }

  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, const char *call,
                                         xcoll_request_t request,
                                         std::vector<at::Tensor> outputs,
                                         std::vector<at::Tensor> keep,
                                         std::function<void()> after) {
    auto work = c10::make_intrusive<WorkXcoll>(
        rank_, type, call, comm_, request, std::move(outputs), std::move(keep),
        std::move(after));
    {
      std::lock_guard<std::mutex> lock(queue_lock_);
      queue_.push_back(work);
    }
    queue_cond_.notify_one();
    return work;
  }

  // Completes works in issue order (xcoll runs them in that order), so that
  // futures complete without a wait.
  void completer_main() {
    for (;;) {
      c10::intrusive_ptr<WorkXcoll> work;
      {
        std::unique_lock<std::mutex> lock(queue_lock_);
        queue_cond_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty())
          return; // stopping, with nothing left
        work = queue_.front();
        queue_.pop_front();
      }
      work->complete_blocking();
    }
  }

  StoreBridge bridge_;
  xcoll_comm_t comm_ = nullptr;
  std::mutex queue_lock_;
  std::condition_variable queue_cond_;
  std::deque<c10::intrusive_ptr<WorkXcoll>> queue_;
  bool stopping_ = false;
  std::thread completer_;
};

} // namespace xcoll_torch

namespace {

c10::intrusive_ptr<xcoll_torch::ProcessGroupXcoll>
make_process_group(const c10::intrusive_ptr<c10d::Store> &store, int rank,
                   int size, std::chrono::milliseconds timeout) {
  return c10::make_intrusive<xcoll_torch::ProcessGroupXcoll>(store, rank, size,
                                                             timeout);
}

c10::intrusive_ptr<c10d::ProcessGroup>
create_process_group(const c10::intrusive_ptr<c10d::Store> &store, int rank,
                     int size, std::chrono::milliseconds timeout) {
  return make_process_group(store, rank, size, timeout);
}

} // namespace

PYBIND11_MODULE(xcoll_torch, m) {
  m.doc() = "torch.distributed backend \"xcoll\" over xcoll's C API";
  // The base classes' Python types must exist before ours refer to them.
  py::module_ dist = py::module_::import("torch.distributed");
  py::class_<xcoll_torch::ProcessGroupXcoll, c10d::ProcessGroup,
             c10::intrusive_ptr<xcoll_torch::ProcessGroupXcoll>>(
      m, "ProcessGroupXcoll")
      .def(py::init(&make_process_group), py::arg("store"), py::arg("rank"),
           py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("transport",
                             &xcoll_torch::ProcessGroupXcoll::transport,
                             "The xcoll backend underneath: tcp, ucx or "
                             "nccl_like (XCOLL_BACKEND)");
  m.def("create_process_group", &create_process_group, py::arg("store"),
        py::arg("rank"), py::arg("size"), py::arg("timeout"),
        py::call_guard<py::gil_scoped_release>(),
        "The creator registered with torch.distributed: (store, rank, size, "
        "timeout) -> ProcessGroup");
  m.attr("xcoll_version") = xcoll_version();
  // import xcoll_torch is all it takes: init_process_group("xcoll") works.
  py::object backend = dist.attr("Backend");
  if (!py::hasattr(backend, "XCOLL"))
    backend.attr("register_backend")("xcoll", m.attr("create_process_group"));
}
