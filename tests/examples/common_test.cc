// Torch parts of the trainer frame (examples/frame) and the survival
// building blocks.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <torch/torch.h>
// glog (through Torch) defines CHECK; Catch's must win in this file.
#undef CHECK
#include "ddprun_catch.h"

#include "examples/frame/batch_loader.h"
#include "examples/frame/eval_metrics.h"
#include "examples/frame/image_io.h"
#include "examples/frame/nifti_io.h"
#include "examples/frame/norm_counts.h"
#include "examples/frame/norm_layer.h"
#include "examples/survival/cox_loss.h"
#include "examples/survival/smart_cache.h"
#include "examples/vqa/vqa_data.h"
#include "tests/common/remove_at_exit.h"
#include "tests/examples/hostile_files.h"

namespace ddprun::examples {
namespace {

std::string TempDir() {
  std::string dir = "/tmp/ddprun_common_test_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  return ddprun::testing::RemoveAtExit(dir);
}

TEST_CASE("ReadNifti: round-trips a 4D volume in C,D,H,W order", "[nifti]") {
  const std::string path = TempDir() + "/v.nii.gz";
  torch::Tensor v =
      torch::arange(2 * 3 * 4 * 5, torch::kFloat32).reshape({2, 3, 4, 5});
  REQUIRE(WriteNifti(path, v).ok());
  auto back = ReadNifti(path);
  REQUIRE(back.ok());
  CHECK(back->sizes() == v.sizes());
  CHECK(torch::equal(*back, v));
  CHECK(ReadNiftiChecked(path, 2, {3, 4, 5}).ok());
}

// An uncompressed NIfTI-1 file of int16 voxels 0..n-1 with a scale and an
// offset, as scanners write them (WriteNifti writes float32 only).
void WriteInt16Nifti(const std::string& path, int nx, int ny, int nz,
                     float slope, float inter) {
  std::string file = testing::NiftiHeader(nx, ny, nz, /*datatype=*/4,
                                          /*bitpix=*/16, slope, inter);
  for (int16_t i = 0; i < nx * ny * nz; ++i) {
    file.append(reinterpret_cast<const char*>(&i), sizeof(i));
  }
  std::ofstream(path, std::ios::binary) << file;
}

TEST_CASE("ReadNifti: integer voxels come back as float32, scaled",
          "[nifti]") {
  const std::string path = TempDir() + "/scaled.nii";
  WriteInt16Nifti(path, 5, 4, 3, /*slope=*/2.0f, /*inter=*/1.0f);
  auto v = ReadNifti(path);
  REQUIRE(v.ok());
  CHECK(v->scalar_type() == torch::kFloat32);
  CHECK(v->sizes() == torch::IntArrayRef({1, 3, 4, 5}));
  // Stored x-fastest: index [0, z, y, x] holds z*20 + y*5 + x.
  const torch::Tensor want =
      torch::arange(60, torch::kFloat32).reshape({1, 3, 4, 5}) * 2 + 1;
  CHECK(torch::equal(*v, want));
}

TEST_CASE("ReadNifti: float volumes read twice are independent tensors",
          "[nifti]") {
  const std::string path = TempDir() + "/twice.nii";
  REQUIRE(WriteNifti(path, torch::full({4, 4, 4}, 3.0)).ok());
  auto a = ReadNifti(path);
  auto b = ReadNifti(path);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  a->add_(1);  // writable, and owned by the tensor alone
  CHECK(a->eq(4).all().item<bool>());
  CHECK(b->eq(3).all().item<bool>());
}

TEST_CASE(
    "ReadNifti: missing, truncated, non-NIfTI and wrong-shape files name the "
    "file",
    "[nifti]") {
  const std::string dir = TempDir();
  CHECK(ReadNifti(dir + "/absent.nii").status().code() ==
        StatusCode::kNotFound);

  const std::string good = dir + "/good.nii";
  REQUIRE(WriteNifti(good, torch::ones({8, 8, 8})).ok());
  const std::string truncated = dir + "/truncated.nii";
  std::filesystem::copy_file(good, truncated,
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(truncated,
                               std::filesystem::file_size(good) - 700);
  auto t = ReadNifti(truncated);
  REQUIRE_FALSE(t.ok());
  CHECK(t.status().message().find(truncated + ": truncated") == 0);

  const std::string text = dir + "/text.nii";
  std::ofstream(text) << "not a nifti file at all";
  auto x = ReadNifti(text);
  REQUIRE_FALSE(x.ok());
  CHECK(x.status().message().find(text) == 0);

  auto shape = ReadNiftiChecked(good, 1, {16, 16, 16});
  REQUIRE_FALSE(shape.ok());
  CHECK(shape.status().message() ==
        good + ": wrong shape 1x8x8x8 (expected 1x16x16x16, as CxDxHxW)");
}

TEST_CASE("ReadGrayImage: PNG round trip, resize, and a corrupt file",
          "[image]") {
  const std::string dir = TempDir();
  torch::Tensor img = torch::zeros({16, 16});
  img.index_put_({torch::indexing::Slice(0, 8), torch::indexing::Slice()}, 1.0);
  REQUIRE(WriteGrayPng(dir + "/a.png", img).ok());
  auto back = ReadGrayImage(dir + "/a.png", 0);
  REQUIRE(back.ok());
  CHECK(torch::allclose(back->squeeze(0), img));
  auto small = ReadGrayImage(dir + "/a.png", 8);
  REQUIRE(small.ok());
  CHECK(small->sizes() == torch::IntArrayRef({1, 8, 8}));
  std::ofstream(dir + "/bad.png") << "\x89PNG\r\n garbage";
  auto bad = ReadGrayImage(dir + "/bad.png", 0);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find(dir + "/bad.png: cannot decode image") ==
        0);
}

TEST_CASE("ReadGrayImage: decodes a JPEG within a few gray levels", "[image]") {
  const std::string dir = TempDir();
  // Two flat halves (JPEG is exact enough away from the edge) and a ramp.
  torch::Tensor img = torch::full({16, 32}, 0.25);
  img.index_put_({torch::indexing::Slice(8, 16), torch::indexing::Slice()},
                 0.75);
  REQUIRE(WriteGrayJpeg(dir + "/a.jpg", img).ok());
  std::ifstream in(dir + "/a.jpg", std::ios::binary);
  char magic[3] = {};
  in.read(magic, 3);
  CHECK(std::string(magic, 3) == "\xff\xd8\xff");  // a JPEG, not a PNG
  auto back = ReadGrayImage(dir + "/a.jpg", 0);
  REQUIRE(back.ok());
  REQUIRE(back->sizes() == torch::IntArrayRef({1, 16, 32}));
  CHECK(back->index({0, 2, 5}).item<float>() == Approx(0.25).margin(0.02));
  CHECK(back->index({0, 13, 20}).item<float>() == Approx(0.75).margin(0.02));
  CHECK((*back - img).abs().mean().item<float>() < 0.02);

  std::ofstream(dir + "/cut.jpg", std::ios::binary)
      << std::string("\xff\xd8\xff\xe0", 4) << "truncated";
  auto bad = ReadGrayImage(dir + "/cut.jpg", 0);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find(dir + "/cut.jpg: cannot decode image") ==
        0);
}

TEST_CASE("ReadVqaJsonl: each --uncertain_policy maps -1 labels as documented",
          "[vqa]") {
  const std::string path = TempDir() + "/policy.jsonl";
  // Labels: 1, 0, -1, null, then zeros.
  std::ofstream(path) << "{\"image\": \"x.png\", \"question\": \"q?\", "
                         "\"answer\": \"yes\", \"labels\": "
                         "[1,0,-1,null,0,0,0,0,0,0,0,0,0,-1]}\n";
  auto ignore = ReadVqaJsonl(path, UncertainPolicy::kIgnore);
  auto zeros = ReadVqaJsonl(path, UncertainPolicy::kZeros);
  auto ones = ReadVqaJsonl(path, UncertainPolicy::kOnes);
  REQUIRE(ignore.ok());
  REQUIRE(zeros.ok());
  REQUIRE(ones.ok());
  const VqaRecord& i = (*ignore)[0];
  const VqaRecord& z = (*zeros)[0];
  const VqaRecord& o = (*ones)[0];
  CHECK(i.uncertain == 2);
  // Certain labels are the same under every policy; null is always masked.
  for (const VqaRecord* r : {&i, &z, &o}) {
    CHECK(r->labels[0] == 1.0f);
    CHECK(r->mask[0] == 1.0f);
    CHECK(r->labels[1] == 0.0f);
    CHECK(r->mask[1] == 1.0f);
    CHECK(r->mask[3] == 0.0f);
  }
  CHECK(i.mask[2] == 0.0f);  // ignore: out of loss and AUROC
  CHECK(i.mask[13] == 0.0f);
  CHECK(z.mask[2] == 1.0f);
  CHECK(z.labels[2] == 0.0f);
  CHECK(o.mask[2] == 1.0f);
  CHECK(o.labels[2] == 1.0f);
  CHECK(o.labels[13] == 1.0f);
  CHECK(i.image == TempDir() + "/x.png");  // relative to the JSONL
}

TEST_CASE("ConcordanceIndex: perfect, reversed, ties in risk and censoring",
          "[metrics]") {
  std::vector<double> time{1, 2, 3, 4}, event{1, 1, 1, 1};
  CHECK(ConcordanceIndex({4, 3, 2, 1}, time, event) == 1.0);
  CHECK(ConcordanceIndex({1, 2, 3, 4}, time, event) == 0.0);
  CHECK(ConcordanceIndex({1, 1, 1, 1}, time, event) == 0.5);
  // Subject 0 censored at t=1: pairs starting from it are not comparable.
  // Comparable: (1,2),(1,3),(2,3) with risks 3>2 yes, 3>5 no, 2>5 no.
  CHECK(ConcordanceIndex({9, 3, 2, 5}, time, {0, 1, 1, 1}) ==
        Approx(1.0 / 3.0));
}

TEST_CASE(
    "Auroc and MeanAuroc: ranks with ties, masked entries, single-class "
    "columns",
    "[metrics]") {
  CHECK(Auroc({0.1, 0.4, 0.35, 0.8}, {0, 0, 1, 1}) == Approx(0.75));
  CHECK(Auroc({0.5, 0.5}, {0, 1}) == Approx(0.5));
  CHECK(std::isnan(Auroc({0.1, 0.2}, {1, 1})));
  torch::Tensor scores =
      torch::tensor({{0.9, 0.1}, {0.1, 0.2}, {0.8, 0.3}}, torch::kFloat64);
  torch::Tensor labels =
      torch::tensor({{1, 0}, {0, 0}, {1, 0}}, torch::kFloat64);
  torch::Tensor mask = torch::ones({3, 2});
  CHECK(MeanAuroc(scores, labels, mask) == Approx(1.0));  // column 1 skipped
}

TEST_CASE("Dice, PSNR and SSIM: known values", "[metrics]") {
  torch::Tensor a = torch::zeros({4, 4});
  torch::Tensor b = torch::zeros({4, 4});
  a.index_put_({0}, 1.0);  // 4 pixels
  b.index_put_({0}, 1.0);
  b.index_put_({1}, 1.0);  // 8 pixels
  auto [inter, total] = DiceSums(a, b);
  CHECK(DiceFromSums(inter, total) == Approx(2.0 * 4 / 12));
  CHECK(DiceFromSums(0, 0) == 1.0);
  torch::Tensor x = torch::rand({8, 8, 8});
  CHECK(Psnr(x, x + 0.1, 1.0) == Approx(20.0).margin(1e-6));
  CHECK(Ssim(x, x, 1.0) == Approx(1.0));
  CHECK(Ssim(x, torch::rand({8, 8, 8}), 1.0) < 0.3);
}

TEST_CASE("CoxPartialLikelihoodLoss: Breslow ties match a hand computation",
          "[survival]") {
  // times 1, 2, 2, 3 with events 1, 1, 1, 0; risks r.
  torch::Tensor r = torch::tensor({0.5, -0.2, 0.3, 1.0});
  torch::Tensor t = torch::tensor({1.0, 2.0, 2.0, 3.0});
  torch::Tensor e = torch::tensor({1.0, 1.0, 1.0, 0.0});
  auto ex = [](double v) { return std::exp(v); };
  const double all = ex(0.5) + ex(-0.2) + ex(0.3) + ex(1.0);
  const double from2 =
      ex(-0.2) + ex(0.3) + ex(1.0);  // both tied at t=2 share it
  const double expected = -((0.5 - std::log(all)) + (-0.2 - std::log(from2)) +
                            (0.3 - std::log(from2))) /
                          3.0;
  CHECK(CoxPartialLikelihoodLoss(r, t, e).item<double>() ==
        Approx(expected).epsilon(1e-5));
  torch::Tensor w = torch::zeros({4}, torch::requires_grad());
  torch::Tensor none = CoxPartialLikelihoodLoss(w, t, torch::zeros({4}));
  CHECK(none.item<double>() == 0.0);
  none.backward();
  CHECK(w.grad().defined());
}

TEST_CASE("MakeNorm: warm-start batch norm follows writes to its batch count",
          "[norm]") {
  // The layer keeps a host copy of num_batches_tracked (no device read per
  // forward); a write from elsewhere (checkpoint load, DDP broadcast) must
  // still be seen while the count decides the momentum.
  for (NormKind kind : {NormKind::kBatch, NormKind::kSyncBatch}) {
    CAPTURE(NormKindName(kind));
    torch::nn::AnyModule norm = MakeNorm(kind, 2, 2, 1, worker::World());
    torch::nn::Module& m = *norm.ptr();
    m.train();
    torch::Tensor tracked = m.named_buffers()["num_batches_tracked"];
    torch::Tensor mean = m.named_buffers()["running_mean"];
    for (int i = 0; i < 3; ++i) norm.forward(torch::randn({4, 2, 3, 3}));
    CHECK(tracked.item<int64_t>() == 3);
    // The count reset: the next batch's momentum is 1/(0+1), so the running
    // mean becomes that batch's mean exactly.
    {
      torch::NoGradGuard no_grad;
      tracked.zero_();
    }
    torch::Tensor x = torch::randn({4, 2, 3, 3}) + 5;
    norm.forward(x);
    CHECK(torch::allclose(mean, x.mean({0, 2, 3}), 1e-5, 1e-5));
    CHECK(tracked.item<int64_t>() == 1);
    // The second batch after the reset averages with momentum 1/2.
    torch::Tensor x2 = torch::randn({4, 2, 3, 3}) - 5;
    norm.forward(x2);
    CHECK(torch::allclose(mean, (x.mean({0, 2, 3}) + x2.mean({0, 2, 3})) / 2,
                          1e-5, 1e-5));
  }
}

TEST_CASE(
    "MakeNorm: a batch norm rolled back from 9 batches to 8 counts 8 again "
    "once told (RereadBatchCounts)",
    "[norm]") {
  // Restart scope "failed": a failure inside the 9th step makes every rank
  // put its buffers back to the 8th step's and redo the 9th. Past the
  // warm-up the layer no longer reads its count; without the reread it
  // kept 9 and updated with momentum 1/10 instead of 1/9 (the redone run's
  // validation then differed from the uninterrupted one's).
  for (NormKind kind : {NormKind::kBatch, NormKind::kSyncBatch}) {
    CAPTURE(NormKindName(kind));
    torch::manual_seed(11);
    std::vector<torch::Tensor> batches;
    for (int i = 0; i < 9; ++i) batches.push_back(torch::randn({4, 2, 3, 3}));
    auto make = [&] {
      torch::nn::AnyModule norm = MakeNorm(kind, 2, 2, 1, worker::World());
      norm.ptr()->train();
      return norm;
    };
    torch::nn::AnyModule straight = make();
    for (const torch::Tensor& x : batches) straight.forward(x);
    torch::nn::AnyModule redone = make();
    for (int i = 0; i < 8; ++i) redone.forward(batches[i]);
    std::vector<torch::Tensor> saved;
    for (const torch::Tensor& b : redone.ptr()->buffers())
      saved.push_back(b.detach().clone());
    redone.forward(batches[8]);  // the interrupted attempt
    {
      torch::NoGradGuard no_grad;
      size_t i = 0;
      for (const torch::Tensor& b : redone.ptr()->buffers())
        b.detach().copy_(saved[i++]);
    }
    RereadBatchCounts();
    redone.forward(batches[8]);  // the redo
    auto a = straight.ptr()->named_buffers();
    auto b = redone.ptr()->named_buffers();
    for (const char* name :
         {"running_mean", "running_var", "num_batches_tracked"}) {
      CAPTURE(name);
      CHECK(torch::equal(a[name], b[name]));
    }
  }
}

TEST_CASE(
    "SmartCache: swaps replace_num items per epoch, loaded in the background",
    "[survival]") {
  std::atomic<int> loads{0};
  SmartCache cache({10, 11, 12, 13, 14, 15}, /*cache_num=*/4, /*replace_num=*/2,
                   [&](int64_t item) -> StatusOr<torch::Tensor> {
                     ++loads;
                     return torch::full({1}, static_cast<float>(item));
                   });
  REQUIRE(cache.BeginEpoch(0).ok());
  CHECK(cache.ItemAt(0) == 10);
  CHECK(cache.Get(3).item<float>() == 13);
  CHECK(cache.last_epoch_stats().loaded == 4);
  REQUIRE(cache.BeginEpoch(1).ok());
  CHECK(cache.ItemAt(0) == 12);
  CHECK(cache.ItemAt(3) == 15);
  CHECK(cache.Get(3).item<float>() == 15);
  CHECK(cache.last_epoch_stats().kept == 2);        // 12 and 13
  CHECK(cache.last_epoch_stats().prefetched == 2);  // 14 and 15
  CHECK(cache.last_epoch_stats().loaded == 0);
  // 14 and 15 came from the refresh thread started by BeginEpoch(0); the
  // one for epoch 2 may already be running.
  CHECK(cache.background_loads() >= 2);
  CHECK(loads.load() >= 6);
}

TEST_CASE(
    "BatchLoader: yields batches in order with threads and reports load errors",
    "[loader]") {
  auto batches = MakeBatches({0, 1, 2, 3, 4, 5, 6}, 3, false);
  REQUIRE(batches.size() == 3);
  CHECK(batches[2] == std::vector<int64_t>{6});
  CHECK(MakeBatches({0, 1, 2, 3, 4, 5, 6}, 3, true).size() == 2);
  BatchLoader<int64_t> loader(
      batches,
      [](const std::vector<int64_t>& items) -> StatusOr<int64_t> {
        if (items[0] == 6) return InvalidArgumentError("bad item 6");
        return items[0];
      },
      /*num_workers=*/2);
  CHECK(*loader.Next() == 0);
  CHECK(*loader.Next() == 3);
  auto err = loader.Next();
  REQUIRE_FALSE(err.ok());
  CHECK(err.status().message() == "bad item 6");
}

}  // namespace
}  // namespace ddprun::examples
