// backend_xcoll_coll.cpp - the collectives of the torch backend "xcoll"
// (allreduce, broadcast, reduce, allgather, reduce_scatter, their base and
// coalesced forms, barrier) and the two forms every call takes: flat_call
// (flat tensors) and list_call (a tensor and a list of world_size).
//
// Each call is sized by core's table of collectives: the table's row says
// which tensor is the send and which the receive buffer, how many elements
// each holds, and whether the call takes an op, a root or a peer.

#include "backend_xcoll.h"

namespace xcoll_torch {

c10::intrusive_ptr<c10d::Work>
BackendXcoll::allreduce(std::vector<at::Tensor> &tensors,
                        const c10d::AllreduceOptions &opts) {
  at::Tensor tensor = single_tensor(tensors, "allreduce");
  return flat_call("allreduce", XCOLL_COLL_ALLREDUCE,
                   c10d::OpType::ALLREDUCE, tensor, tensor, &opts.reduceOp,
                   0, opts.asyncOp);
}

// DDP's and the coalescing manager's: one allreduce over the tensors laid
// end to end, then each gets its part back.
c10::intrusive_ptr<c10d::Work>
BackendXcoll::allreduce_coalesced(std::vector<at::Tensor> &tensors,
                                  const c10d::AllreduceCoalescedOptions &opts) {
  const char *call = "allreduce_coalesced";
  TORCH_CHECK(!tensors.empty(), "xcoll backend: ", call, ": no tensors");
  for (const at::Tensor &t : tensors)
    check_alike(call, tensors[0], t);
  Staged s;
  s.send = s.recv = end_to_end(tensors);
  s.count = static_cast<size_t>(s.send.numel());
  s.outputs = tensors;
  s.after = split_back(s.send, tensors);
  return run(call, XCOLL_COLL_ALLREDUCE, c10d::OpType::COALESCED, tensors[0],
             &opts.reduceOp, 0, opts.asyncOp, std::move(s));
}

c10::intrusive_ptr<c10d::Work>
BackendXcoll::broadcast(std::vector<at::Tensor> &tensors,
                        const c10d::BroadcastOptions &opts) {
  at::Tensor tensor = single_tensor(tensors, "broadcast");
  return flat_call("broadcast", XCOLL_COLL_BROADCAST,
                   c10d::OpType::BROADCAST, tensor, tensor, nullptr,
                   opts.rootRank, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work>
BackendXcoll::reduce(std::vector<at::Tensor> &tensors,
                     const c10d::ReduceOptions &opts) {
  at::Tensor tensor = single_tensor(tensors, "reduce");
  return flat_call("reduce", XCOLL_COLL_REDUCE, c10d::OpType::REDUCE, tensor,
                   tensor, &opts.reduceOp, opts.rootRank, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work>
BackendXcoll::allgather(std::vector<std::vector<at::Tensor>> &outputs,
                        std::vector<at::Tensor> &inputs,
                        const c10d::AllgatherOptions &opts) {
  at::Tensor input = single_tensor(inputs, "allgather");
  return list_call("allgather", XCOLL_COLL_ALLGATHER,
                   c10d::OpType::ALLGATHER, input, outputs, nullptr, 0,
                   opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work>
BackendXcoll::_allgather_base(at::Tensor &output, at::Tensor &input,
                              const c10d::AllgatherOptions &opts) {
  return flat_call("_allgather_base", XCOLL_COLL_ALLGATHER,
                   c10d::OpType::_ALLGATHER_BASE, input, output, nullptr, 0,
                   opts.asyncOp);
}

// The functional collectives' (FSDP2, DTensor) coalesced forms: one
// xcoll call per pair, all of them one work.
c10::intrusive_ptr<c10d::Work> BackendXcoll::allgather_into_tensor_coalesced(
    std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
    const c10d::AllgatherOptions &opts) {
  return coalesced("allgather_into_tensor_coalesced", outputs, inputs,
                   [&](at::Tensor &out, at::Tensor &in) {
                     return _allgather_base(out, in, opts);
                   });
}

c10::intrusive_ptr<c10d::Work> BackendXcoll::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
    const c10d::ReduceScatterOptions &opts) {
  return coalesced("reduce_scatter_tensor_coalesced", outputs, inputs,
                   [&](at::Tensor &out, at::Tensor &in) {
                     return _reduce_scatter_base(out, in, opts);
                   });
}

c10::intrusive_ptr<c10d::Work>
BackendXcoll::reduce_scatter(std::vector<at::Tensor> &outputs,
                             std::vector<std::vector<at::Tensor>> &inputs,
                             const c10d::ReduceScatterOptions &opts) {
  at::Tensor output = single_tensor(outputs, "reduce_scatter");
  return list_call("reduce_scatter", XCOLL_COLL_REDUCE_SCATTER,
                   c10d::OpType::REDUCE_SCATTER, output, inputs,
                   &opts.reduceOp, 0, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work>
BackendXcoll::_reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                                   const c10d::ReduceScatterOptions &opts) {
  return flat_call("_reduce_scatter_base", XCOLL_COLL_REDUCE_SCATTER,
                   c10d::OpType::_REDUCE_SCATTER_BASE, input, output,
                   &opts.reduceOp, 0, opts.asyncOp);
}

// On the host communicator; with a device bound to the group
// (init_process_group(device_id=...)), on that device's.
c10::intrusive_ptr<c10d::Work>
BackendXcoll::barrier(const c10d::BarrierOptions &opts) {
  const char *call = "barrier";
  c10::Device device(c10::DeviceType::CPU);
  if (opts.device)
    device = *opts.device;
  else if (bound_device_id_)
    device = *bound_device_id_;
  Call c = begin(call,
                 device.is_cuda() ? device
                                  : c10::Device(c10::DeviceType::CPU),
                 opts.asyncOp);
  if (c.comm->stream_ordered) {
    // No stream argument in xcoll_ibarrier: a one-element allreduce on
    // the comm's stream orders it like the other calls.
    at::Tensor one = at::zeros({1}, at::TensorOptions().device(device));
    XcollArgs a(XCOLL_COLL_ALLREDUCE, XCOLL_FLOAT32);
    a.sendbuf = a.recvbuf = one.data_ptr();
    a.count = 1;
    issue(c, a);
    auto work = end(c, c10d::OpType::BARRIER, {}, {one}, nullptr);
    c.lock.unlock();
    work->complete_blocking(); // a barrier holds the host
    return work;
  }
  issue(c, XcollArgs(XCOLL_COLL_BARRIER, XCOLL_UINT8));
  return end(c, c10d::OpType::BARRIER, {}, {}, nullptr);
}

// A work over several works (the coalesced forms, made by coalesced below).
class BackendXcoll::WorkList : public c10d::Work {
public:
  WorkList(int rank, std::vector<c10::intrusive_ptr<c10d::Work>> works,
           std::vector<at::Tensor> outputs)
      : Work(rank, c10d::OpType::COALESCED), works_(std::move(works)),
        outputs_(std::move(outputs)) {
    // The list's future completes when every work's has, with the
    // first error among them.
    std::vector<c10::Device> devices;
    if (!outputs_.empty() && outputs_[0].is_cuda())
      devices.push_back(outputs_[0].device());
    future_ = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()), devices);
    struct Pending {
      std::mutex lock;
      size_t left;
      std::exception_ptr error;
    };
    auto pending = std::make_shared<Pending>();
    pending->left = works_.size();
    auto future = future_;
    auto outputs_copy = outputs_;
    if (works_.empty())
      future_->markCompleted(c10::IValue(outputs_copy));
    for (auto &w : works_)
      w->getFuture()->addCallback(
          [pending, future, outputs_copy](c10::ivalue::Future &done) {
            std::unique_lock<std::mutex> lock(pending->lock);
            if (done.hasError() && !pending->error)
              pending->error = done.exception_ptr();
            if (--pending->left > 0)
              return;
            std::exception_ptr error = pending->error;
            lock.unlock();
            if (error)
              future->setError(error);
            else
              future->markCompleted(c10::IValue(outputs_copy));
          });
  }
  bool isCompleted() override {
    for (auto &w : works_)
      if (!w->isCompleted())
        return false;
    return true;
  }
  bool wait(std::chrono::milliseconds timeout) override {
    for (auto &w : works_)
      w->wait(timeout);
    return true;
  }
  void synchronize() override {
    for (auto &w : works_)
      w->synchronize();
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    return future_;
  }

private:
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

template <typename Fn>
c10::intrusive_ptr<c10d::Work>
BackendXcoll::coalesced(const char *call, std::vector<at::Tensor> &outputs,
                        std::vector<at::Tensor> &inputs, Fn one) {
  TORCH_CHECK(outputs.size() == inputs.size(), "xcoll backend: ", call,
              ": as many outputs as inputs, please");
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (size_t i = 0; i < inputs.size(); i++)
    works.push_back(one(outputs[i], inputs[i]));
  // xcoll completes a communicator's calls in issue order: the last work
  // done means all are. The returned work waits for every one.
  return c10::make_intrusive<WorkList>(rank_, std::move(works), outputs);
}

// A call on flat tensors: input is its send buffer and output its receive
// buffer (one tensor for the in-place forms; undefined for the buffer its
// row leaves unused: send's receive buffer, recv's send buffer). The
// count argument comes from the tensor on the side that is not per rank
// (allgather's input, reduce_scatter's output; alltoall's input over
// world_size), and the other tensor must hold what the table says.
// root: the root, or the peer of send and recv (ignored without either).
// A tensor that is not contiguous is staged in a contiguous copy.
c10::intrusive_ptr<c10d::Work> BackendXcoll::flat_call(
    const char *call, xcoll_coll_kind kind, c10d::OpType type,
    const at::Tensor &input, const at::Tensor &output,
    const c10d::ReduceOp *reduce_op, int64_t root, bool async_op) {
  const xcoll_coll_info *info = xcoll_coll_info_of(kind);
  check_root_or_peer(call, info, root);
  bool in_place =
      input.defined() && output.defined() && input.is_same(output);
  const at::Tensor &any = input.defined() ? input : output;
  Staged s;
  s.count = static_cast<size_t>(any.numel());
  if (input.defined() && output.defined() && !in_place) {
    check_alike(call, input, output);
    s.count = count_of(call, info, input, output);
    Shape shape = shape_of(call, kind, s.count, rank_ == root);
    expect_numel(call, "input", input, shape.send, info->send_per_rank,
                 s.count);
    expect_numel(call, "output", output, shape.recv, info->recv_per_rank,
                 s.count);
  }
  if (input.defined())
    s.send = input.contiguous();
  if (output.defined()) {
    s.recv = in_place ? s.send : output.contiguous();
    s.outputs = {output};
    s.after = copy_back(s.recv, output);
  } else {
    s.outputs = {input}; // send: nothing comes back
  }
  return run(call, kind, type, any, reduce_op, root, async_op,
             std::move(s));
}

// A list form (allgather, reduce_scatter, gather, scatter): tensor on one
// side, and on the side the table has per rank one list of world_size
// tensors of tensor's size (gather's outputs and scatter's inputs on the
// root only). The list is laid end to end in one flat buffer of the
// table's size, which xcoll writes (outputs) or reads (inputs).
c10::intrusive_ptr<c10d::Work> BackendXcoll::list_call(
    const char *call, xcoll_coll_kind kind, c10d::OpType type,
    const at::Tensor &tensor, std::vector<std::vector<at::Tensor>> &lists,
    const c10d::ReduceOp *reduce_op, int64_t root, bool async_op) {
  const xcoll_coll_info *info = xcoll_coll_info_of(kind);
  check_root_or_peer(call, info, root);
  bool list_is_output = info->recv_per_rank != 0;
  const char *list_name = list_is_output ? "output" : "input";
  bool list_root_only =
      list_is_output ? info->recv_root_only : info->send_root_only;
  bool list_used = !list_root_only || rank_ == root;
  Staged s;
  s.count = static_cast<size_t>(tensor.numel());
  Shape shape = shape_of(call, kind, s.count, rank_ == root);
  std::vector<at::Tensor> list;
  if (list_used) {
    TORCH_CHECK(lists.size() == 1 &&
                    lists[0].size() == static_cast<size_t>(size_),
                "xcoll backend: ", call, " wants",
                list_root_only ? " on the root" : "", " one list of ",
                size_, " ", list_name, " tensors");
    list = lists[0];
    for (size_t r = 0; r < list.size(); r++) {
      check_alike(call, tensor, list[r]);
      TORCH_CHECK(static_cast<size_t>(list[r].numel()) == s.count,
                  "xcoll backend: ", call, ": ", list_name, " tensor ", r,
                  " holds ", list[r].numel(), " elements, expected ",
                  s.count, " (as many as the ",
                  list_is_output ? "input" : "output", " tensor)");
    }
  }
  at::Tensor single = tensor.contiguous();
  at::Tensor flat;
  if (list_used)
    flat = list_is_output
               ? at::empty({static_cast<int64_t>(shape.recv)},
                           tensor.options())
               : end_to_end(list);
  TORCH_INTERNAL_ASSERT(
      !list_used || static_cast<size_t>(flat.numel()) ==
                        (list_is_output ? shape.recv : shape.send));
  if (list_is_output) {
    s.send = single;
    s.recv = flat;
    s.outputs = list;
    if (list_used)
      s.after = split_back(flat, list);
  } else {
    s.send = flat;
    s.recv = single;
    s.outputs = {tensor};
    s.after = copy_back(single, tensor);
  }
  return run(call, kind, type, tensor, reduce_op, root, async_op,
             std::move(s));
}

BackendXcoll::Shape BackendXcoll::shape_of(const char *call,
                                           xcoll_coll_kind kind, size_t count,
                                           bool is_root) {
  Shape shape;
  xcoll_status status = xcoll_coll_shape(kind, count, size_, is_root,
                                         &shape.send, &shape.recv, nullptr);
  TORCH_CHECK(status == XCOLL_SUCCESS, "xcoll backend: ", call, ": ",
              count, " elements per rank at world_size ", size_,
              " overflow a size: ", xcoll_strerror(status));
  return shape;
}

// The count argument of a call on two flat tensors (the table's
// count_name): the tensor on the side that is not per rank sets it; with
// both per rank (alltoall) it is the input's elements over world_size.
size_t BackendXcoll::count_of(const char *call, const xcoll_coll_info *info,
                              const at::Tensor &input,
                              const at::Tensor &output) {
  if (!info->send_per_rank)
    return static_cast<size_t>(input.numel());
  if (!info->recv_per_rank)
    return static_cast<size_t>(output.numel());
  TORCH_CHECK(input.numel() % size_ == 0, "xcoll backend: ", call,
              ": the input tensor holds ", input.numel(),
              " elements, not a multiple of world_size (", size_, ")");
  return static_cast<size_t>(input.numel() / size_);
}

// t (the call's input or output tensor) must hold expected elements:
// world_size times count where its side is per rank.
void BackendXcoll::expect_numel(const char *call, const char *what,
                                const at::Tensor &t, size_t expected,
                                bool per_rank, size_t count) {
  if (static_cast<size_t>(t.numel()) == expected)
    return;
  std::string why = per_rank ? " (world_size " + std::to_string(size_) +
                                   " x " + std::to_string(count) +
                                   " elements per rank)"
                             : "";
  TORCH_CHECK(false, "xcoll backend: ", call, ": the ", what,
              " tensor holds ", t.numel(), " elements, expected ", expected,
              why);
}

void BackendXcoll::check_root_or_peer(const char *call,
                                      const xcoll_coll_info *info,
                                      int64_t root) {
  if (info->has_root)
    check_root(call, root);
  if (info->has_peer)
    check_peer(call, root);
}

// Tensors of one call share a type and a device.
void BackendXcoll::check_alike(const char *call, const at::Tensor &first,
                               const at::Tensor &other) {
  TORCH_CHECK(first.scalar_type() == other.scalar_type() &&
                  first.device() == other.device(),
              "xcoll backend: ", call,
              ": every tensor must have one type and device (",
              first.scalar_type(), " on ", first.device(), " and ",
              other.scalar_type(), " on ", other.device(), ")");
}

// The tensors laid end to end in one flat tensor.
at::Tensor BackendXcoll::end_to_end(const std::vector<at::Tensor> &tensors) {
  std::vector<at::Tensor> flat;
  for (const at::Tensor &t : tensors)
    flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

// The inverse: each target gets its block of flat, laid end to end.
std::function<void()>
BackendXcoll::split_back(const at::Tensor &flat,
                         std::vector<at::Tensor> targets) {
  return [flat, targets]() {
    int64_t offset = 0;
    for (const at::Tensor &t : targets) {
      const_cast<at::Tensor &>(t).copy_(
          flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  };
}

void BackendXcoll::check_root(const char *call, int64_t root) {
  TORCH_CHECK(root >= 0 && root < size_, "xcoll backend: ", call, ": root ",
              root, " is outside [0, ", size_, ")");
}

void BackendXcoll::check_peer(const char *call, int peer) {
  TORCH_CHECK(peer >= 0 && peer < size_ && peer != rank_, "xcoll backend: ",
              call, ": peer ", peer, " is not another rank of [0, ", size_,
              ")");
}

at::Tensor BackendXcoll::single_tensor(std::vector<at::Tensor> &tensors,
                                       const char *call) {
  TORCH_CHECK(tensors.size() == 1, "xcoll backend: ", call,
              " takes one tensor per process (got ", tensors.size(), ")");
  return tensors[0];
}

// When work is a contiguous copy of tensor, copy the result back.
std::function<void()> BackendXcoll::copy_back(const at::Tensor &work,
                                              const at::Tensor &tensor) {
  if (work.data_ptr() == tensor.data_ptr())
    return nullptr;
  return [work, tensor]() mutable { tensor.copy_(work); };
}

} // namespace xcoll_torch
