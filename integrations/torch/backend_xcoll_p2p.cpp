// backend_xcoll_p2p.cpp - the calls of the torch backend "xcoll" that a
// build of xcoll may lack (integrations/torch/CMakeLists.txt checks
// include/xcoll.h): send and recv, coalescing (batch_isend_irecv),
// alltoall and alltoall_base, gather and scatter. Without them, each is an
// error naming the call.

#include "backend_xcoll.h"

namespace xcoll_torch {

#if XCOLL_TORCH_HAVE_P2P

// torch's send and recv have no async flag (isend is send): the
// non-blocking form, or the group's.
c10::intrusive_ptr<c10d::Work>
BackendXcoll::send(std::vector<at::Tensor> &tensors, int dst,
                   int /*tag: NCCL's way*/) {
  return flat_call("send", XCOLL_COLL_SEND, c10d::OpType::SEND,
                   single_tensor(tensors, "send"), at::Tensor(), nullptr,
                   dst, true);
}

c10::intrusive_ptr<c10d::Work>
BackendXcoll::recv(std::vector<at::Tensor> &tensors, int src, int /*tag*/) {
  return flat_call("recv", XCOLL_COLL_RECV, c10d::OpType::RECV, at::Tensor(),
                   single_tensor(tensors, "recv"), nullptr, src, true);
}

// batch_isend_irecv: the calls between start and end are one xcoll group
// (xcoll_group_start ... xcoll_igroup_end), NCCL's coalescing.
void BackendXcoll::startCoalescing() {
  check_open("startCoalescing");
  TORCH_CHECK(!coalescing_, "xcoll backend: startCoalescing: already "
                            "coalescing (endCoalescing first)");
  issue_lock_.lock(); // one thread's group, until endCoalescing
  xcoll_status status = xcoll_group_start();
  if (status != XCOLL_SUCCESS) {
    issue_lock_.unlock();
    TORCH_CHECK(false, "xcoll backend: startCoalescing: ",
                xcoll_strerror(status), ": ", xcoll_last_error());
  }
  issue_owner_ = std::this_thread::get_id();
  coalescing_ = true;
  coalesced_.clear();
  coalesced_comm_ = nullptr;
}

c10::intrusive_ptr<c10d::Work> BackendXcoll::endCoalescing() {
  TORCH_CHECK(coalescing_, "xcoll backend: endCoalescing without "
                           "startCoalescing");
  coalescing_ = false;
  xcoll_request_t request = nullptr;
  xcoll_status status = xcoll_igroup_end(&request);
  std::vector<c10::intrusive_ptr<WorkXcoll>> members;
  members.swap(coalesced_);
  Comm *comm = coalesced_comm_ != nullptr ? coalesced_comm_ : host_.get();
  issue_lock_.unlock();
  check("endCoalescing", status, comm->comm);
  std::vector<at::Tensor> outputs;
  for (auto &member : members)
    for (const at::Tensor &t : member->outputs_)
      outputs.push_back(t);
  auto leader = c10::make_intrusive<WorkXcoll>(
      rank_, c10d::OpType::COALESCED, "coalesced calls", comm->comm, request,
      outputs, std::vector<at::Tensor>{}, nullptr, std::nullopt, nullptr);
  leader->followers_ = members; // completed with the group's request
  if (request == nullptr) // an empty group
    leader->complete_with(nullptr);
  else
    enqueue(leader, true); // its members' futures wait on it
  return leader;
}
#else

c10::intrusive_ptr<c10d::Work> BackendXcoll::send(std::vector<at::Tensor> &,
                                                  int, int) {
  unsupported("send");
}

c10::intrusive_ptr<c10d::Work> BackendXcoll::recv(std::vector<at::Tensor> &,
                                                  int, int) {
  unsupported("recv");
}

void BackendXcoll::startCoalescing() {
  unsupported("startCoalescing");
}

c10::intrusive_ptr<c10d::Work> BackendXcoll::endCoalescing() {
  unsupported("endCoalescing");
}
#endif
#if XCOLL_TORCH_HAVE_ALLTOALL

// all_to_all_single: equal splits are xcoll_alltoall; split sizes (in
// rows of dimension 0) are xcoll_alltoallv's counts and displacements.
c10::intrusive_ptr<c10d::Work> BackendXcoll::alltoall_base(
    at::Tensor &output, at::Tensor &input, std::vector<int64_t> &output_splits,
    std::vector<int64_t> &input_splits, const c10d::AllToAllOptions &opts) {
  const char *call = "alltoall_base";
  if (output_splits.empty() && input_splits.empty())
    return flat_call(call, XCOLL_COLL_ALLTOALL, c10d::OpType::ALLTOALL_BASE,
                     input, output, nullptr, 0, opts.asyncOp);
  check_alike(call, input, output);
  Staged s;
  split_counts(call, input, input_splits, s.per_peer[0], s.per_peer[1]);
  split_counts(call, output, output_splits, s.per_peer[2], s.per_peer[3]);
  s.send = input.contiguous();
  s.recv = output.contiguous();
  s.outputs = {output};
  s.after = copy_back(s.recv, output);
  return run(call, XCOLL_COLL_ALLTOALLV, c10d::OpType::ALLTOALL_BASE, input,
             nullptr, 0, opts.asyncOp, std::move(s));
}

// all_to_all with lists: the inputs end to end, xcoll_alltoallv, then
// each output gets its block.
c10::intrusive_ptr<c10d::Work>
BackendXcoll::alltoall(std::vector<at::Tensor> &outputs,
                       std::vector<at::Tensor> &inputs,
                       const c10d::AllToAllOptions &opts) {
  const char *call = "alltoall";
  TORCH_CHECK(outputs.size() == static_cast<size_t>(size_) &&
                  inputs.size() == static_cast<size_t>(size_),
              "xcoll backend: alltoall wants ", size_,
              " input and output tensors (one per rank), got ",
              inputs.size(), " and ", outputs.size());
  Staged s;
  size_t send_total = 0, recv_total = 0;
  for (int r = 0; r < size_; r++) {
    check_alike(call, inputs[0], inputs[r]);
    check_alike(call, inputs[0], outputs[r]);
    s.per_peer[0].push_back(inputs[r].numel());
    s.per_peer[1].push_back(send_total);
    send_total += inputs[r].numel();
    s.per_peer[2].push_back(outputs[r].numel());
    s.per_peer[3].push_back(recv_total);
    recv_total += outputs[r].numel();
  }
  s.send = end_to_end(inputs);
  s.recv =
      at::empty({static_cast<int64_t>(recv_total)}, inputs[0].options());
  s.outputs = outputs;
  s.after = split_back(s.recv, outputs);
  return run(call, XCOLL_COLL_ALLTOALLV, c10d::OpType::ALLTOALL, inputs[0],
             nullptr, 0, opts.asyncOp, std::move(s));
}
#else

c10::intrusive_ptr<c10d::Work>
BackendXcoll::alltoall_base(at::Tensor &, at::Tensor &, std::vector<int64_t> &,
                            std::vector<int64_t> &,
                            const c10d::AllToAllOptions &) {
  unsupported("alltoall_base (all_to_all_single)");
}

c10::intrusive_ptr<c10d::Work>
BackendXcoll::alltoall(std::vector<at::Tensor> &, std::vector<at::Tensor> &,
                       const c10d::AllToAllOptions &) {
  unsupported("alltoall");
}
#endif
#if XCOLL_TORCH_HAVE_GATHER

c10::intrusive_ptr<c10d::Work>
BackendXcoll::gather(std::vector<std::vector<at::Tensor>> &outputs,
                     std::vector<at::Tensor> &inputs,
                     const c10d::GatherOptions &opts) {
  at::Tensor input = single_tensor(inputs, "gather");
  return list_call("gather", XCOLL_COLL_GATHER, c10d::OpType::GATHER, input,
                   outputs, nullptr, opts.rootRank, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work>
BackendXcoll::scatter(std::vector<at::Tensor> &outputs,
                      std::vector<std::vector<at::Tensor>> &inputs,
                      const c10d::ScatterOptions &opts) {
  at::Tensor output = single_tensor(outputs, "scatter");
  return list_call("scatter", XCOLL_COLL_SCATTER, c10d::OpType::SCATTER,
                   output, inputs, nullptr, opts.rootRank, opts.asyncOp);
}
#else

c10::intrusive_ptr<c10d::Work>
BackendXcoll::gather(std::vector<std::vector<at::Tensor>> &,
                     std::vector<at::Tensor> &, const c10d::GatherOptions &) {
  unsupported("gather");
}

c10::intrusive_ptr<c10d::Work>
BackendXcoll::scatter(std::vector<at::Tensor> &,
                      std::vector<std::vector<at::Tensor>> &,
                      const c10d::ScatterOptions &) {
  unsupported("scatter");
}
#endif

// Counts and displacements in elements of an all_to_all_single split
// along dimension 0 (empty splits: equal ones).
void BackendXcoll::split_counts(const char *call, const at::Tensor &t,
                                const std::vector<int64_t> &splits,
                                std::vector<size_t> &counts,
                                std::vector<size_t> &displs) {
  int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  int64_t row = rows == 0 ? 0 : t.numel() / rows;
  TORCH_CHECK(splits.empty() || splits.size() == static_cast<size_t>(size_),
              "xcoll backend: ", call, ": ", size_,
              " split sizes wanted, got ", splits.size());
  TORCH_CHECK(!splits.empty() || rows % size_ == 0, "xcoll backend: ", call,
              ": ", rows, " rows do not split evenly over ", size_,
              " ranks");
  size_t offset = 0;
  int64_t total = 0;
  for (int r = 0; r < size_; r++) {
    int64_t n = splits.empty() ? rows / size_ : splits[r];
    counts.push_back(static_cast<size_t>(n * row));
    displs.push_back(offset);
    offset += static_cast<size_t>(n * row);
    total += n;
  }
  TORCH_CHECK(total == rows, "xcoll backend: ", call, ": split sizes add "
              "up to ", total, " rows, the tensor has ", rows);
}

} // namespace xcoll_torch
