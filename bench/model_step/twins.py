"""Python PyTorch-eager twins of bench/model_step's C++ training steps.

Each twin is the trainer's model written layer for layer in plain PyTorch
(same module order, so parameters and buffers line up one to one with the
C++ model's), the trainer's loss, optimizer and hyper-parameters, a random
batch of the same shape made once on the device, and the same precision
handling (autocast over the forward pass; fp16 adds torch.cuda.amp's
GradScaler). The C++ sources each class mirrors are named in its docstring.
twin_bench.py times them and checks them against the C++ steps.

STEPS[trainer](device, precision, batch=None) builds a step; .step() runs
one training step and returns the loss; .model, .params, .samples_per_step.
"""
import contextlib
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

TRAINERS = ("survival", "ddpm", "vqa", "segmentation")


class StepPrecision:
    """bench/model_step/step_precision.h: fp32, bf16 autocast, or fp16
    autocast + dynamic loss scaling (CUDA only)."""

    def __init__(self, name, device):
        if name not in ("fp32", "bf16", "fp16"):
            raise ValueError(f"--precision must be fp32, bf16 or fp16, got '{name}'")
        if name == "fp16" and device.type != "cuda":
            raise ValueError("--precision fp16 needs --device cuda "
                             "(CPU autocast is bf16 only)")
        self.name = name
        self.device_type = device.type
        self.scaler = None
        if name == "fp16":
            # torch.amp.GradScaler("cuda") from torch 2.3 (torch.cuda.amp's
            # is deprecated there); the same algorithm.
            amp_scaler = getattr(torch.amp, "GradScaler", None)
            self.scaler = amp_scaler("cuda") if amp_scaler else torch.cuda.amp.GradScaler()

    def autocast(self):
        if self.name == "fp32":
            return contextlib.nullcontext()
        dtype = torch.float16 if self.name == "fp16" else torch.bfloat16
        return torch.autocast(self.device_type, dtype=dtype)

    def backward(self, loss):
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def step(self, optimizer, clip_params=None, clip=None):
        """Optimizer step (skipped after an fp16 overflow), clipping the
        gradients of clip_params to norm clip first when given."""
        if self.scaler:
            if clip_params is not None:
                self.scaler.unscale_(optimizer)
                nn.utils.clip_grad_norm_(clip_params, clip)
            self.scaler.step(optimizer)
            self.scaler.update()
            return
        if clip_params is not None:
            nn.utils.clip_grad_norm_(clip_params, clip)
        optimizer.step()


_WARM_BATCHES = 9


def _warm_momentum(bn):
    # examples/frame/norm_layer.cc: the n-th training batch updates the
    # running statistics with momentum max(0.1, 1/n), n counted on the host
    # as the C++ layer counts it (TrackedCount): the buffer is read only
    # when the copy is unknown, or rewritten (its version moved) within the
    # first 9 batches, so a warm step reads nothing back from the device.
    if not bn.training:
        return
    buf = bn.num_batches_tracked
    known = getattr(bn, "_tracked", None)
    if known is None or (known[0] < _WARM_BATCHES and buf._version != known[1]):
        known = (int(buf.item()), buf._version)
        bn._tracked = known
    bn.momentum = max(0.1, 1.0 / (known[0] + 1.0))


def _counted(bn):
    # After a training forward that added 1 to the buffer (one in-place add,
    # one version step); anything else makes the next forward read it.
    if not bn.training:
        return
    known = getattr(bn, "_tracked", None)
    buf = bn.num_batches_tracked
    if known is not None and (known[0] >= _WARM_BATCHES or buf._version == known[1] + 1):
        bn._tracked = (known[0] + 1, buf._version)
    else:
        bn._tracked = None


class WarmBatchNorm2d(nn.BatchNorm2d):
    def forward(self, x):
        _warm_momentum(self)
        y = super().forward(x)
        _counted(self)
        return y


class WarmBatchNorm3d(nn.BatchNorm3d):
    def forward(self, x):
        _warm_momentum(self)
        y = super().forward(x)
        _counted(self)
        return y


def _random_tokens(batch, length, vocab, min_words, max_words, device):
    """Token ids 2..vocab-1, min_words..max_words of them, padded with 0."""
    tokens = torch.randint(2, vocab, (batch, length), device=device)
    lengths = torch.randint(min_words, max_words + 1, (batch, 1), device=device)
    return tokens.masked_fill_(torch.arange(length, device=device).ge(lengths), 0)


class TwinStep:
    """What every step holds: the model on the device, its precision, Adam
    over its parameters (in registration order, as C++'s parameters())."""

    # --adam-foreach: None = torch's default (the multi-tensor "foreach"
    # Adam when every parameter is on CUDA, else one parameter at a time, as
    # LibTorch's torch::optim::Adam always does); False = one at a time.
    adam_foreach = None

    def __init__(self, model, device, precision, lr, weight_decay=0.0):
        self.model = model.to(device)
        self.params = list(self.model.parameters())
        self.precision = StepPrecision(precision, device)
        self.optimizer = torch.optim.Adam(self.params, lr=lr, weight_decay=weight_decay,
                                          foreach=TwinStep.adam_foreach)


# --- worker/src/conv3d.cc: the trainers' Conv3d ---------------------------

def _cpu_autocast():
    try:
        return torch.is_autocast_enabled("cpu")  # torch >= 2.4
    except TypeError:
        return torch.is_autocast_cpu_enabled()


class Conv3d(nn.Conv3d):
    """worker::Conv3d, the same way in Python: a CPU float batch of one that
    torch would send to slow_conv3d (20x slower than oneDNN at batch two)
    runs as one conv2d over its depth slices (stride 1, even zero padding)
    or as a pair with a zero sample. The twins use it so both sides of the
    comparison run the same kernels; it is what a Python user would write
    around the same pitfall."""

    def _takes_native(self, x):
        if (x.dim() != 5 or x.size(0) != 1 or x.device.type != "cpu"
                or x.dtype != torch.float32 or _cpu_autocast()
                or self.groups != 1):
            return False
        k, strided = self.kernel_size, any(s != 1 for s in self.stride)
        dilated = any(d != 1 for d in self.dilation)
        if (not strided and not dilated and k[1] == 1 and k[2] == 1
                and torch.get_num_threads() <= 1):
            return False
        if k[1] > 3 and k[2] > 3:
            return False
        return x.size(1) * x.size(2) * x.size(3) <= 20480

    def forward(self, x):
        if not self._takes_native(x):
            return super().forward(x)
        pads = self._reversed_padding_repeated_twice
        kd = self.kernel_size[0]
        if (all(s == 1 for s in self.stride) and all(d == 1 for d in self.dilation)
                and self.padding_mode == "zeros" and len(set(pads)) == 1
                and x.size(2) + 2 * pads[0] - kd + 1 >= 2):
            p = pads[0]
            out_depth = x.size(2) + 2 * p - kd + 1
            slices = F.pad(x[0].transpose(0, 1), (0, 0, 0, 0, 0, 0, p, p))
            stacked = torch.cat([slices.narrow(0, i, out_depth) for i in range(kd)], 1)
            w = self.weight
            w2 = w.permute(0, 2, 1, 3, 4).reshape(w.size(0), kd * w.size(1), w.size(3),
                                                  w.size(4))
            out = F.conv2d(stacked, w2, self.bias, padding=(p, p))
            return out.transpose(0, 1).unsqueeze(0).contiguous()
        return super().forward(torch.cat([x, torch.zeros_like(x)])).narrow(0, 0, 1)


# --- survival: examples/survival/resnet3d.cc, cox_loss.cc -----------------

def _conv3d(cin, cout, k, stride):
    return Conv3d(cin, cout, k, stride=stride, padding=k // 2, bias=False)


class ResidualBlock(nn.Module):
    def __init__(self, body, cin, cout, stride):
        super().__init__()
        self.body = body
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(_conv3d(cin, cout, 1, stride),
                                          WarmBatchNorm3d(cout))

    def forward(self, x):
        identity = self.shortcut(x) if self.shortcut is not None else x
        return torch.relu(self.body(x) + identity)


class ResNet3d(nn.Module):
    """ResNet-10 (one basic block per stage), as the trainer's default."""

    def __init__(self, width=8, in_channels=1, num_outputs=1, blocks=(1, 1, 1, 1)):
        super().__init__()
        w = width
        self.stem = nn.Sequential(_conv3d(in_channels, w, 7, 2), WarmBatchNorm3d(w),
                                  nn.ReLU(True), nn.MaxPool3d(3, stride=2, padding=1))
        self.stages = nn.Sequential()
        cin = w
        for s, n in enumerate(blocks):
            planes = w << s
            for b in range(n):
                stride = 2 if s > 0 and b == 0 else 1
                body = nn.Sequential(_conv3d(cin, planes, 3, stride), WarmBatchNorm3d(planes),
                                     nn.ReLU(True), _conv3d(planes, planes, 3, 1),
                                     WarmBatchNorm3d(planes))
                self.stages.append(ResidualBlock(body, cin, planes, stride))
                cin = planes
        self.head = nn.Linear(cin, num_outputs)

    def forward(self, x):
        x = self.stages(self.stem(x))
        return self.head(F.adaptive_avg_pool3d(x, 1).flatten(1))


def cox_partial_likelihood_loss(risk, time_, event):
    # examples/survival/cox_loss.cc, with no host reads either: the event
    # count and the tie groups stay on the device.
    r = risk.reshape(-1).to(torch.float32)
    t = time_.reshape(-1).to(r.device, torch.float32)
    e = event.reshape(-1).to(r.device, torch.float32)
    events = e.sum().clamp_min(1)
    order = torch.argsort(t, dim=0, descending=True)
    rs, ts, es = r.index_select(0, order), t.index_select(0, order), e.index_select(0, order)
    log_cumsum = torch.logcumsumexp(rs, 0)
    n = ts.size(0)
    if n == 0:
        return r.sum() * 0.0
    position = torch.arange(n, dtype=torch.int64, device=r.device)
    # Position k ends its tie group when k + 1 holds another time.
    ends = torch.ones(n, dtype=torch.bool, device=r.device)
    if n > 1:
        ends[:n - 1] = ts[:n - 1] != ts[1:]
    end_at = torch.where(ends, position, torch.full_like(position, n))
    group_end = torch.cummin(end_at.flip(0), 0)[0].flip(0)
    return -((rs - log_cumsum.index_select(0, group_end)) * es).sum() / events


class SurvivalStep(TwinStep):
    """bench/model_step/survival_step.cc: batch 8 x 1 x 32^3, Adam 2e-3,
    weight decay 1e-4."""

    def __init__(self, device, precision, batch=None):
        super().__init__(ResNet3d(), device, precision, lr=2e-3, weight_decay=1e-4)
        if batch is None:
            batch = [torch.randn(8, 1, 32, 32, 32, device=device),
                     torch.rand(8, device=device) * 10 + 0.1,
                     torch.bernoulli(torch.full((8,), 0.7, device=device))]
        self.images, self.time, self.event = batch
        self.samples_per_step = 8

    def step(self):
        self.model.train()
        with self.precision.autocast():
            risk = self.model(self.images)
        loss = cox_partial_likelihood_loss(risk, self.time, self.event)
        self.optimizer.zero_grad()
        self.precision.backward(loss)
        self.precision.step(self.optimizer)
        return loss.item()


# --- ddpm: examples/ddpm/unet3d.cc, fast_ddpm.cc ---------------------------

class GroupNorm(nn.GroupNorm):
    """examples/frame/norm_layer.cc's group norm: normalises in float32 when
    autocast hands it a lower-precision input (as torch's CUDA autocast does;
    1.13's CPU group_norm refuses bf16 input with float32 weights)."""

    def forward(self, x):
        if self.weight is not None and x.dtype != self.weight.dtype:
            x = x.to(self.weight.dtype)
        return super().forward(x)


def _conv3(cin, cout):
    return Conv3d(cin, cout, 3, padding=1)


class ResBlock(nn.Module):
    def __init__(self, cin, cout, time_dim, groups=8):
        super().__init__()
        self.norm1 = GroupNorm(math.gcd(groups, cin), cin)
        self.conv1 = _conv3(cin, cout)
        self.time = nn.Linear(time_dim, cout)
        self.norm2 = GroupNorm(math.gcd(groups, cout), cout)
        self.conv2 = _conv3(cout, cout)
        self.skip = Conv3d(cin, cout, 1) if cin != cout else None

    def forward(self, x, temb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.time(temb).view(h.size(0), -1, 1, 1, 1)
        h = self.conv2(F.silu(self.norm2(h)))
        return h + (self.skip(x) if self.skip is not None else x)


class UNet3d(nn.Module):
    def __init__(self, in_channels=4, out_channels=1, width=8, time_dim=64):
        super().__init__()
        w = width
        self.time_dim = time_dim
        self.time_mlp = nn.Sequential(nn.Linear(time_dim, time_dim), nn.SiLU(),
                                      nn.Linear(time_dim, time_dim))
        self.conv_in = _conv3(in_channels, w)
        self.down = Conv3d(w, w, 3, stride=2, padding=1)
        self.blocks = nn.ModuleList([ResBlock(w, w, time_dim), ResBlock(w, 2 * w, time_dim),
                                     ResBlock(2 * w, 2 * w, time_dim),
                                     ResBlock(3 * w, w, time_dim)])
        self.norm_out = GroupNorm(math.gcd(8, w), w)
        self.conv_out = _conv3(w, out_channels)

    def forward(self, x, t):
        half = self.time_dim // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=x.dtype, device=x.device)
                          / half)
        args = t.to(x.dtype).unsqueeze(1) * freqs.unsqueeze(0)
        temb = self.time_mlp(torch.cat([torch.sin(args), torch.cos(args)], 1))
        h1 = self.blocks[0](self.conv_in(x), temb)
        h2 = self.blocks[2](self.blocks[1](self.down(h1), temb), temb)
        up = F.interpolate(h2, size=list(h1.shape[2:]), mode="trilinear", align_corners=False)
        h = self.blocks[3](torch.cat([up, h1], 1), temb)
        return self.conv_out(F.silu(self.norm_out(h)))


class FastDdpm:
    """Linear 1000-step beta schedule, training on `steps` of its
    timesteps (Fast-DDPM's uniform ones); x0-prediction (the trainer's
    default)."""

    def __init__(self, steps=10, total_steps=1000):
        self.alpha_bar, prod = [], 1.0
        for t in range(total_steps):
            prod *= 1.0 - (1e-4 + (0.02 - 1e-4) * t / (total_steps - 1))
            self.alpha_bar.append(prod)
        skip = total_steps // steps
        self.timesteps = [0] + [k * skip - 1 for k in range(1, steps)]

    def add_noise(self, x0):
        n = x0.size(0)
        pick = torch.randint(len(self.timesteps), (n,), dtype=torch.int64)
        ts, a, s = [], [], []
        for i in range(n):
            t = self.timesteps[pick[i].item()]
            ts.append(t)
            a.append(math.sqrt(self.alpha_bar[t]))
            s.append(math.sqrt(1.0 - self.alpha_bar[t]))
        view = [n] + [1] * (x0.dim() - 1)
        sa = torch.tensor(a, dtype=torch.float32).view(view).to(x0.device, x0.dtype)
        sb = torch.tensor(s, dtype=torch.float32).view(view).to(x0.device, x0.dtype)
        eps = torch.randn_like(x0)
        return sa * x0 + sb * eps, torch.tensor(ts).to(x0.device), x0


class DdpmStep(TwinStep):
    """bench/model_step/ddpm_step.cc: 4 micro-batches of 1 volume 4 x 16^3,
    clip 1.0, Adam 2e-3."""

    def __init__(self, device, precision, batch=None):
        super().__init__(UNet3d(), device, precision, lr=2e-3)
        self.ddpm = FastDdpm()
        self.volumes = batch[0] if batch else torch.randn(4, 4, 16, 16, 16, device=device)
        self.conditions = torch.tensor([0, 1, 2], dtype=torch.int64, device=device)
        self.samples_per_step = 4

    def step(self):
        self.model.train()
        self.optimizer.zero_grad()
        micro = self.volumes.split(1)
        total = 0.0
        for m in micro:
            target = m.narrow(1, 3, 1)
            cond = m.index_select(1, self.conditions)
            x_t, t, regression_target = self.ddpm.add_noise(target)
            with self.precision.autocast():
                out = self.model(torch.cat([x_t, cond], 1), t)
            loss = F.mse_loss(out.to(torch.float32), regression_target) / float(len(micro))
            total += loss.item()
            self.precision.backward(loss)
        self.precision.step(self.optimizer, self.params, 1.0)
        return total


# --- segmentation: examples/segmentation/prompt_unet.cc --------------------

def _double_conv(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), WarmBatchNorm2d(cout),
                         nn.ReLU(True), nn.Conv2d(cout, cout, 3, padding=1, bias=False),
                         WarmBatchNorm2d(cout), nn.ReLU(True))


class PromptUNet(nn.Module):
    def __init__(self, vocab_size=15, width=8, embed_dim=32):
        super().__init__()
        w = width
        self.enc1 = _double_conv(3, w)
        self.enc2 = _double_conv(w, 2 * w)
        self.enc3 = _double_conv(2 * w, 4 * w)
        self.bottleneck = _double_conv(4 * w, 8 * w)
        self.up3 = nn.ConvTranspose2d(8 * w, 4 * w, 2, stride=2)
        self.dec3 = _double_conv(8 * w, 4 * w)
        self.up2 = nn.ConvTranspose2d(4 * w, 2 * w, 2, stride=2)
        self.dec2 = _double_conv(4 * w, 2 * w)
        self.up1 = nn.ConvTranspose2d(2 * w, w, 2, stride=2)
        self.dec1 = _double_conv(2 * w, w)
        self.out = nn.Conv2d(w, 1, 1)
        self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=0)
        self.film = nn.Sequential(nn.Linear(embed_dim, 64), nn.ReLU(True),
                                  nn.Linear(64, 2 * 8 * w))

    def forward(self, image, tokens):
        n, h, w = image.size(0), image.size(2), image.size(3)
        ys = torch.linspace(-1, 1, h, dtype=image.dtype, device=image.device)
        xs = torch.linspace(-1, 1, w, dtype=image.dtype, device=image.device)
        ys = ys.view(1, 1, h, 1).expand(n, 1, h, w)
        xs = xs.view(1, 1, 1, w).expand(n, 1, h, w)
        x1 = self.enc1(torch.cat([image, ys, xs], 1))
        x2 = self.enc2(F.max_pool2d(x1, 2))
        x3 = self.enc3(F.max_pool2d(x2, 2))
        b = self.bottleneck(F.max_pool2d(x3, 2))
        mask = tokens.ne(0).to(b.dtype).unsqueeze(-1)
        words = self.embed(tokens).to(b.dtype)
        prompt = (words * mask).sum(1) / mask.sum(1).clamp_min(1.0)
        gamma, beta = self.film(prompt).to(b.dtype).chunk(2, 1)
        b = b * (1 + gamma.unsqueeze(-1).unsqueeze(-1)) + beta.unsqueeze(-1).unsqueeze(-1)
        d3 = self.dec3(torch.cat([self.up3(b), x3], 1))
        d2 = self.dec2(torch.cat([self.up2(d3), x2], 1))
        d1 = self.dec1(torch.cat([self.up1(d2), x1], 1))
        return self.out(d1)


def dice_bce_loss(logits, target, dice_weight=1.0):
    l = logits.to(torch.float32)
    bce = F.binary_cross_entropy_with_logits(l, target)
    p = torch.sigmoid(l)
    inter = (p * target).sum((1, 2, 3))
    total = p.sum((1, 2, 3)) + target.sum((1, 2, 3))
    dice = (2 * inter + 1) / (total + 1)
    return bce + dice_weight * (1 - dice).mean()


class SegmentationStep(TwinStep):
    """bench/model_step/segmentation_step.cc: batch 8 x 1 x 64^2, 12-token
    prompts, Adam 1e-3."""

    def __init__(self, device, precision, batch=None):
        super().__init__(PromptUNet(), device, precision, lr=1e-3)
        if batch is None:
            batch = [torch.rand(8, 1, 64, 64, device=device),
                     torch.bernoulli(torch.full((8, 1, 64, 64), 0.1, device=device)),
                     _random_tokens(8, 12, 15, 4, 7, device)]
        self.images, self.masks, self.tokens = batch
        self.samples_per_step = 8

    def step(self):
        self.model.train()
        with self.precision.autocast():
            logits = self.model(self.images, self.tokens)
        loss = dice_bce_loss(logits, self.masks)
        self.optimizer.zero_grad()
        self.precision.backward(loss)
        self.precision.step(self.optimizer)
        return loss.item()


# --- vqa: examples/vqa/vqa_model.cc ----------------------------------------

class VqaModel(nn.Module):
    def __init__(self, vocab_size=16, num_answers=7, num_labels=14, width=16, hidden=64):
        super().__init__()
        layers, cin = [], 1
        for s in range(4):
            cout = width << s
            layers += [nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False),
                       GroupNorm(math.gcd(4, cout), cout), nn.ReLU(True)]
            cin = cout
        layers += [nn.AdaptiveAvgPool2d(2), nn.Flatten()]
        cin *= 4
        self.encoder = nn.Sequential(*layers)
        self.embed = nn.Embedding(vocab_size, hidden, padding_idx=0)
        self.gru = nn.GRU(hidden, hidden, batch_first=True)
        self.answer_head = nn.Sequential(nn.Linear(cin + hidden, hidden), nn.ReLU(True),
                                         nn.Linear(hidden, num_answers))
        self.label_head = nn.Linear(cin, num_labels)

    def forward(self, images, tokens):
        image = self.encoder(images)
        outputs = self.gru(self.embed(tokens))[0]
        last = tokens.ne(0).sum(1).clamp_min(1) - 1
        question = outputs.gather(1, last.view(-1, 1, 1).expand(-1, 1, outputs.size(2)))
        fused = torch.cat([image, question.squeeze(1).to(image.dtype)], 1)
        return self.answer_head(fused), self.label_head(image)


class VqaStep(TwinStep):
    """bench/model_step/vqa_step.cc: batch 16 x 1 x 64^2, 12-token
    questions, 7 answers, 14 labels, Adam 2e-3."""

    def __init__(self, device, precision, batch=None):
        super().__init__(VqaModel(), device, precision, lr=2e-3)
        if batch is None:
            batch = [torch.rand(16, 1, 64, 64, device=device),
                     _random_tokens(16, 12, 16, 5, 8, device),
                     torch.randint(0, 7, (16,), device=device),
                     torch.bernoulli(torch.full((16, 14), 0.5, device=device)),
                     torch.bernoulli(torch.full((16, 14), 0.9, device=device))]
        self.images, self.tokens, self.answers, self.labels, self.mask = batch
        self.samples_per_step = 16

    def step(self):
        self.model.train()
        self.optimizer.zero_grad()
        with self.precision.autocast():
            answer_logits, label_logits = self.model(self.images, self.tokens)
        ce = F.cross_entropy(answer_logits.to(torch.float32), self.answers, ignore_index=-1)
        bce = F.binary_cross_entropy_with_logits(label_logits.to(torch.float32), self.labels,
                                                 weight=self.mask, reduction="sum")
        loss = (ce + 1.0 * bce / self.mask.sum().clamp_min(1.0)) / 1.0
        value = loss.item()
        self.precision.backward(loss)
        self.precision.step(self.optimizer)
        return value


STEPS = {"survival": SurvivalStep, "ddpm": DdpmStep, "vqa": VqaStep,
         "segmentation": SegmentationStep}
