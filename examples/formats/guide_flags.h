#pragma once

#include <vector>

#include "examples/formats/flag_parser.h"

namespace ddprun::examples {

// The names every trainer takes from the guides' scripts
// (../shared/seeds/*.md), beside ours: --lr, --num_epochs, --log_dir,
// dataloader_num_workers, and the switches --fp16 / --bf16
// (= --mixed_precision fp16|bf16). A trainer adds its own table (e.g.
// batch_size_per_gpu where its batch is per GPU) after these.
std::vector<FlagAlias> CommonGuideAliases();

// The guides' flags that mean nothing for a C++ DDP trainer, each with the
// line that says what happens instead: Weights & Biases (--use_wandb,
// --wandb_project), DataParallel and launch choices (--multi_gpu,
// --distributed, --use_ddp, --gpus, --world_size, --num_gpus),
// torch.compile, --pin_memory, DeepSpeed (--use_deepspeed, --deepspeed
// [cfg], --deepspeed_config). A trainer's own entry of the same name
// replaces one of these (vqa points DeepSpeed users at --zero).
std::vector<ForeignFlag> CommonForeignFlags();

}  // namespace ddprun::examples
