#pragma once

namespace ddprun::examples {

// The batch norm layers of norm_layer.h keep a host copy of each layer's
// num_batches_tracked, so that a training forward does not read the buffer
// from the device; past the warm-up (9 batches) they stop reading it, as a
// count only grows while training. A caller that puts a model's buffers
// back to an earlier state in the same process (TrainerSession rolling back
// a step that a failure interrupted, a heal) calls this: every such layer
// of the process reads its count again at its next training forward.
// Without it a layer rolled back from 9 batches to 8 would keep 9 and
// update its running statistics with the wrong momentum. Thread-safe.
void RereadBatchCounts();

}  // namespace ddprun::examples
