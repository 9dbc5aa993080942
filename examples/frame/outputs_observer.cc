#include "examples/frame/outputs_observer.h"

#include <torch/torch.h>

#include "ddprun/worker/metrics.h"
#include "examples/outputs/raster_image.h"
#include "examples/outputs/run_outputs.h"

namespace ddprun::examples {
namespace {

// A [H, W] or [C, H, W] (C = 1 or 3) picture with values in [0, 1] as 8-bit
// gray or RGB pixels, row-major and interleaved.
StatusOr<outputs::RasterImage> ToRaster(const at::Tensor& image) {
  at::Tensor t = image.detach().to(at::kCPU, at::kFloat);
  if (t.dim() == 2) t = t.unsqueeze(0);
  if (t.dim() != 3 || (t.size(0) != 1 && t.size(0) != 3)) {
    return Status(StatusCode::kInvalidArgument,
                  "an image must be [H, W] or [C, H, W] with C = 1 or 3");
  }
  t = t.clamp(0, 1).mul(255).round().to(at::kByte).permute({1, 2, 0})
          .contiguous();
  outputs::RasterImage r;
  r.channels = static_cast<int>(t.size(2));
  r.height = static_cast<int>(t.size(0));
  r.width = static_cast<int>(t.size(1));
  r.pixels.assign(t.data_ptr<uint8_t>(), t.data_ptr<uint8_t>() + t.numel());
  return r;
}

}  // namespace

at::Tensor RasterToImage(const outputs::RasterImage& raster) {
  return torch::from_blob(const_cast<uint8_t*>(raster.pixels.data()),
                          {raster.height, raster.width, raster.channels},
                          torch::kUInt8)
      .permute({2, 0, 1})
      .to(torch::kFloat32)
      .div(255.0)
      .contiguous();
}

RunOutputsObserver::RunOutputsObserver(const worker::World& world,
                                       const std::string& output_dir,
                                       const std::string& trainer_name,
                                       int64_t resumed_step)
    : world_(world) {
  if (!world.is_main()) return;
  outputs::RunOutputs::Options o;
  o.output_dir = output_dir;
  o.trainer_name = trainer_name;
  o.resumed_step = resumed_step;
  StatusOr<std::unique_ptr<outputs::RunOutputs>> opened =
      outputs::RunOutputs::Open(o);
  if (opened.ok()) {
    outputs_ = std::move(opened).value();
  } else {
    Report("TensorBoard events and plots are off", opened.status());
  }
}

RunOutputsObserver::~RunOutputsObserver() = default;

void RunOutputsObserver::Report(const std::string& what,
                                const Status& status) {
  if (status.ok() || !reported_.insert(what).second) return;
  worker::LogMain(world_, "warning: " + what + ": " + status.message());
}

void RunOutputsObserver::OnStep(const StepRecord& s) {
  if (!outputs_) return;
  const std::string what = "a training scalar was not recorded";
  Report(what, outputs_->Scalar("train/loss", s.step, s.loss));
  Report(what, outputs_->Scalar("train/lr", s.step, s.learning_rate));
  if (s.samples_per_s) {
    Report(what, outputs_->Scalar("train/samples_per_s", s.step,
                                  *s.samples_per_s));
  }
  if (s.loss_scale != 1) {
    Report(what, outputs_->Scalar("train/loss_scale", s.step, s.loss_scale));
  }
}

void RunOutputsObserver::OnEpoch(const nlohmann::json& record) {
  if (!outputs_) return;
  const int64_t step = record.value("step", int64_t{0});
  for (const auto& [key, value] : record.items()) {
    if (!value.is_number()) continue;
    if (key.rfind("train_", 0) == 0) {
      // train_loss -> train/epoch_loss; a trainer's parts of it
      // (train_physics_loss) -> train/epoch_physics_loss.
      Report("an epoch scalar was not recorded",
             outputs_->Scalar("train/epoch_" + key.substr(6), step,
                              value.get<double>()));
    } else if (key.rfind("val_", 0) == 0) {
      Report("a validation scalar was not recorded",
             outputs_->Scalar("val/" + key.substr(4), step,
                              value.get<double>()));
    }
  }
  Report("the event file could not be flushed", outputs_->EpochEnd());
}

void RunOutputsObserver::OnImage(const std::string& tag, int64_t step,
                                 const at::Tensor& image) {
  if (!outputs_) return;
  StatusOr<outputs::RasterImage> raster = ToRaster(image);
  Report("image '" + tag + "' was not written",
         raster.ok() ? outputs_->Image(tag, step, *raster) : raster.status());
}

void RunOutputsObserver::OnFinish() {
  if (!outputs_) return;
  Status done = outputs_->Finish();
  if (done.ok()) {
    worker::LogMain(world_, "training curves: " + outputs_->plot_path() +
                                "; TensorBoard: tensorboard --logdir " +
                                outputs_->event_file().substr(
                                    0, outputs_->event_file().rfind('/')));
  } else {
    Report("no training curves", done);
  }
}

}  // namespace ddprun::examples
