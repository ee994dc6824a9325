#pragma once
// ALBEF momentum distillation state (Li et al. 2021, "Align before Fuse", §3.3): the momentum
// model, an exponential moving average of the online model, and the queue of its earlier ITC
// features. Both are replicated: every rank applies the same update to the same values (identical
// online weights after the averaged optimizer step, identical all-gathered features), so they
// need no communication and rank 0 alone writes them into a checkpoint.
#include <torch/torch.h>

#include <array>
#include <cstdint>

namespace fnvlp::negatives {

// theta_m <- m * theta_m + (1 - m) * theta over the parameters and buffers of two modules of the
// same structure (ALBEF _momentum_update, applied here after each optimizer step taken). No
// autograd. Throws fnvlp::Error when the structures differ.
void ema_update(torch::nn::Module& momentum, const torch::nn::Module& online, double m);
// The same where `finite` (float 0-dim on the modules' device) is 1; where it is 0 the momentum
// model stays as it is (the static step's skipped step), without a read of the flag by the host.
void ema_update(torch::nn::Module& momentum, const torch::nn::Module& online, double m,
                const torch::Tensor& finite);
// theta_m <- theta (the momentum model's start: a copy of the online model, as ALBEF's
// copy_params).
void copy_module(torch::nn::Module& momentum, const torch::nn::Module& online);

// Ring buffer of momentum features with the ids of the pairs they came from (ALBEF's image_queue,
// text_queue and, from model_retrieval.py, idx_queue; here image_id and pair_id). Everything is a
// buffer, so save_module / load_module (checkpoint.hpp) carry the whole state: features, ids, the
// write pointer and the fill count.
//
// Entries are written at `ptr` and wrap around; the queue starts EMPTY and only its filled rows
// are keys (rows [0, fill): while filling, the pointer has never wrapped). ALBEF starts from
// random unit vectors instead, negatives that belong to no pair; an empty start keeps every key a
// real pair's feature with a real image_id (a deviation from ALBEF, by design).
class FeatureQueueImpl : public torch::nn::Module {
 public:
  FeatureQueueImpl(int64_t capacity, int64_t dim);
  // Appends n rows in order (img/txt [n, dim], ids [n]). With n > capacity only the last
  // `capacity` rows stay, where a row-by-row enqueue would have left them.
  void enqueue(const torch::Tensor& img, const torch::Tensor& txt, const torch::Tensor& image_id,
               const torch::Tensor& pair_id);
  int64_t capacity() const { return img_.size(0); }
  int64_t dim() const { return img_.size(1); }
  int64_t fill() const { return host_state()[1]; }
  int64_t ptr() const { return host_state()[0]; }
  // The filled rows [0, fill) (views, storage order).
  torch::Tensor img() const { return img_.narrow(0, 0, fill()); }
  torch::Tensor txt() const { return txt_.narrow(0, 0, fill()); }
  torch::Tensor image_id() const { return image_id_.narrow(0, 0, fill()); }
  torch::Tensor pair_id() const { return pair_id_.narrow(0, 0, fill()); }
  // Throws fnvlp::Error unless the buffers are [capacity, dim] with a consistent pointer and
  // fill (after loading a checkpoint written with another queue_size or embed_dim). Reads the
  // pointer and fill afresh: run it after every load.
  void check(int64_t capacity, int64_t dim) const;

  // The static step: the whole queue, its filled rows marked, the pointer and fill read and
  // written on the device only.
  const torch::Tensor& all_img() const { return img_; }
  const torch::Tensor& all_txt() const { return txt_; }
  const torch::Tensor& all_image_id() const { return image_id_; }
  // bool [capacity]: the rows that hold a feature.
  torch::Tensor valid() const;
  // enqueue where `finite` (float 0-dim) is 1; nothing changes where it is 0.
  void enqueue_flagged(const torch::Tensor& img, const torch::Tensor& txt,
                       const torch::Tensor& image_id, const torch::Tensor& pair_id,
                       const torch::Tensor& finite);
  // The pointer and fill changed on the device without the host (a replayed graph): the next host
  // read takes them from there.
  void forget_host_state() const { host_of_ = nullptr; }

 private:
  torch::Tensor img_, txt_;           // float [capacity, dim]
  torch::Tensor image_id_, pair_id_;  // int64 [capacity], -1 where empty
  torch::Tensor state_;               // int64 [2]: ptr, fill
  // ptr and fill as last read or written: on a GPU a read of state_ at each use would wait for
  // the queued work. Read again once state_ was replaced (a checkpoint load, a move to another
  // device: new storage) or written in place by anyone else (its version counter moved), and by
  // check(), which runs after every load: a load onto a GPU can get the old block's address back
  // with no version change, and a write through a raw pointer moves no counter.
  const std::array<int64_t, 2>& host_state() const;
  void read_state() const;
  mutable std::array<int64_t, 2> host_ = {0, 0};
  mutable const void* host_of_ = nullptr;
  mutable int64_t host_version_ = -1;
};
TORCH_MODULE(FeatureQueue);

}  // namespace fnvlp::negatives
