// backend_xcoll_work.cpp - the torch Work of the backend "xcoll" (WorkXcoll:
// one xcoll request, waited on exactly once, and the future it completes)
// and the group's completion thread, which completes works in issue order.

#include "backend_xcoll.h"

namespace xcoll_torch {

WorkXcoll::WorkXcoll(int rank, c10d::OpType type, const char *call,
                     xcoll_comm_t comm, xcoll_request_t request,
                     std::vector<at::Tensor> outputs,
                     std::vector<at::Tensor> keep, std::function<void()> after,
                     std::optional<c10::Stream> stream,
                     std::shared_ptr<c10::Event> done)
    : Work(rank, type), call_(call), comm_(comm), request_(request),
      outputs_(std::move(outputs)), keep_(std::move(keep)),
      after_(std::move(after)), stream_(stream), done_(std::move(done)) {
  std::vector<c10::Device> devices;
  if (stream_)
    devices.push_back(stream_->device());
  future_ = c10::make_intrusive<at::ivalue::Future>(
      c10::ListType::create(c10::TensorType::get()), devices);
}

WorkXcoll::~WorkXcoll() {
  complete_blocking();
}

bool WorkXcoll::isCompleted() {
  {
    std::unique_lock<std::mutex> lock(request_lock_, std::try_to_lock);
    if (lock.owns_lock() && request_ != nullptr) {
      int done = 0;
      xcoll_status status = xcoll_test(request_, &done);
      if (done || status != XCOLL_SUCCESS)
        complete_locked();
    }
  }
  std::lock_guard<std::mutex> guard(mutex_);
  return completed_;
}

bool WorkXcoll::wait(std::chrono::milliseconds timeout) {
  if (done_ && timeout == kNoTimeout) {
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      error = exception_;
    }
    if (error)
      std::rethrow_exception(error);
    synchronize();
    return true;
  }
  if (timeout == kNoTimeout)
    complete_blocking();
  else
    want(); // Work::wait(timeout) waits for the completion thread
  return Work::wait(timeout);
}

void WorkXcoll::synchronize() {
  if (done_) {
    c10::Device device = stream_->device();
    done_->block(cuda_guard()->getStream(device));
  }
}

c10::intrusive_ptr<c10::ivalue::Future> WorkXcoll::getFuture() {
  want(); // the future must complete without a wait
  return future_;
}

void WorkXcoll::complete_blocking() {
  std::lock_guard<std::mutex> lock(request_lock_);
  complete_locked();
}

void WorkXcoll::complete_locked() {
  if (request_ == nullptr)
    return;
  xcoll_status status = xcoll_wait(request_);
  request_ = nullptr;
  std::exception_ptr error;
  if (status != XCOLL_SUCCESS)
    error = std::make_exception_ptr(std::runtime_error(
        std::string("xcoll backend: ") + call_ + " failed: " +
        xcoll_strerror(status) + ": " + xcoll_comm_last_error(comm_)));
  complete_with(error);
  for (auto &follower : followers_)
    follower->complete_with(error);
  followers_.clear();
}

void WorkXcoll::complete_with(std::exception_ptr error) {
  request_ = nullptr;
  finished_ = true;
  std::optional<c10::StreamGuard> guard;
  if (stream_)
    guard.emplace(*stream_); // the future's events go on the call's stream
  if (!error) {
    try {
      if (after_)
        after_();
    } catch (...) {
      error = std::current_exception();
    }
  }
  keep_.clear();
  after_ = nullptr;
  finish(error);
  if (error)
    future_->setError(error);
  else
    future_->markCompleted(c10::IValue(outputs_));
}

void WorkXcoll::want() {
  if (!queue_)
    return;
  std::lock_guard<std::mutex> lock(queue_->lock);
  if (!queued_ || wanted_)
    return;
  wanted_ = true;
  queue_->wanted++;
  queue_->cond.notify_one();
}

// Queues work for completion; wanted: the completion thread must complete
// it (see CompletionQueue). Works at the front that their callers
// completed leave the queue here, in the caller's thread, so that a
// blocking call wakes nobody.
void BackendXcoll::enqueue(const c10::intrusive_ptr<WorkXcoll> &work,
                           bool wanted) {
  CompletionQueue &q = *queue_;
  std::lock_guard<std::mutex> lock(q.lock);
  while (!q.works.empty() && q.works.front()->finished_ &&
         !q.works.front()->wanted_) {
    q.works.front()->queued_ = false;
    q.works.pop_front();
  }
  work->queue_ = queue_;
  work->queued_ = true;
  work->wanted_ = wanted;
  q.works.push_back(work);
  if (wanted)
    q.wanted++;
  if (wanted || q.works.size() > CompletionQueue::kMaxUnwaited)
    q.cond.notify_one();
}

// Completes works in issue order when one of them is wanted, when too
// many are left unwaited, or at shutdown (all of them).
void BackendXcoll::completer_main() {
  CompletionQueue &q = *queue_;
  for (;;) {
    c10::intrusive_ptr<WorkXcoll> work;
    {
      std::unique_lock<std::mutex> lock(q.lock);
      q.cond.wait(lock, [&q] {
        return q.stopping || q.wanted > 0 ||
               q.works.size() > CompletionQueue::kMaxUnwaited;
      });
      if (q.works.empty())
        return; // stopping, with nothing left
      work = q.works.front();
      q.works.pop_front();
      work->queued_ = false;
      if (work->wanted_) {
        work->wanted_ = false;
        q.wanted--;
      }
    }
    work->complete_blocking();
  }
}

} // namespace xcoll_torch
