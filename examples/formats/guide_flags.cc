#include "examples/formats/guide_flags.h"

namespace ddprun::examples {

std::vector<FlagAlias> CommonGuideAliases() {
  return {
      {"lr", "learning_rate", ""},
      {"num_epochs", "epochs", ""},
      {"log_dir", "output_dir", ""},
      {"dataloader_num_workers", "num_workers", ""},
      {"fp16", "mixed_precision", "fp16"},
      {"bf16", "mixed_precision", "bf16"},
  };
}

std::vector<ForeignFlag> CommonForeignFlags() {
  using A = ForeignFlag::Arity;
  const std::string launcher =
      "the launcher decides: one process per GPU, e.g. ddprun --standalone "
      "--nproc_per_node=4 <trainer> ... (DistributedDataParallel; alone the "
      "trainer runs one process)";
  const std::string no_deepspeed =
      "no DeepSpeed here: the trainer runs DistributedDataParallel under "
      "ddprun; its precision and accumulation flags are --amp / "
      "--mixed_precision and --gradient_accumulation_steps";
  const std::string no_wandb =
      "no Weights & Biases here (no network needed): metrics go to "
      "<output_dir>/metrics.jsonl";
  const std::string world_size =
      "the world size comes from the launcher (WORLD_SIZE): ddprun "
      "--nproc_per_node=N [--nnodes=M]";
  return {
      {"use_wandb", A::kNone, no_wandb},
      {"wandb_project", A::kOne, no_wandb},
      {"multi_gpu", A::kNone, "no DataParallel: " + launcher},
      {"distributed", A::kNone, "DDP needs no switch: " + launcher},
      {"use_ddp", A::kNone, "DDP needs no switch: " + launcher},
      {"gpus", A::kOne,
       "GPUs are chosen by the launcher (one process per GPU, "
       "--nproc_per_node) and CUDA_VISIBLE_DEVICES"},
      {"world_size", A::kOne, world_size},
      {"num_gpus", A::kOne, world_size},
      {"compile", A::kNone,
       "LibTorch C++ has no torch.compile; the model runs eagerly"},
      {"pin_memory", A::kNone,
       "loader threads build batches in ordinary memory and the training "
       "thread copies them to the device (non_blocking); nothing to pin"},
      {"use_deepspeed", A::kNone, no_deepspeed},
      {"deepspeed", A::kOptional, no_deepspeed},
      {"deepspeed_config", A::kOne, no_deepspeed},
  };
}

}  // namespace ddprun::examples
