"""torchvision's architectures, written out for the tests, plus a small UNet.

PyPI's torchvision wheel is a CUDA build whose compiled operators cannot load beside
CPU torch, and its model modules import the package (and so those operators). These
classes follow ``torchvision.models`` layer for layer (names, shapes, initialisation,
BatchNorm settings), so ``resnet18()``, ``mobilenet_v3_small()`` and ``vit_b_16()``
reach the same ATen operators as torchvision's, forward and backward. Dropout defaults
to 0 so the npu and the CPU, whose random streams differ, can be compared exactly.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from functools import partial

import torch
from torch import nn

# ------------------------------------------------------------------------------------------
# ResNet (torchvision/models/resnet.py)
# ------------------------------------------------------------------------------------------


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, layers: list[int], num_classes: int = 1000) -> None:
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(64, layers[0])
        self.layer2 = self._make_layer(128, layers[1], 2)
        self.layer3 = self._make_layer(256, layers[2], 2)
        self.layer4 = self._make_layer(512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet18(num_classes: int = 1000) -> ResNet:
    return ResNet([2, 2, 2, 2], num_classes)


# ------------------------------------------------------------------------------------------
# MobileNetV3 (torchvision/models/mobilenetv3.py)
# ------------------------------------------------------------------------------------------


def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


class ConvBNActivation(nn.Sequential):
    def __init__(self, cin: int, cout: int, kernel: int = 3, stride: int = 1, groups: int = 1,
                 activation: type[nn.Module] | None = nn.ReLU) -> None:
        norm = partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)
        layers: list[nn.Module] = [nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
                                   norm(cout)]
        if activation is not None:
            layers.append(activation(inplace=True))
        super().__init__(*layers)


class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int, squeeze: int) -> None:
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.activation = nn.ReLU()
        self.scale_activation = nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return scale * x


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, kernel: int, expanded: int, cout: int, use_se: bool, act: str, stride: int) -> None:
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        activation = nn.Hardswish if act == "HS" else nn.ReLU
        layers: list[nn.Module] = []
        if expanded != cin:
            layers.append(ConvBNActivation(cin, expanded, 1, activation=activation))
        layers.append(ConvBNActivation(expanded, expanded, kernel, stride, groups=expanded, activation=activation))
        if use_se:
            layers.append(SqueezeExcitation(expanded, _make_divisible(expanded // 4, 8)))
        layers.append(ConvBNActivation(expanded, cout, 1, activation=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return out + x if self.use_res_connect else out


# (input channels, kernel, expanded channels, output channels, squeeze-excite, activation, stride)
MOBILENET_V3_SMALL = [
    (16, 3, 16, 16, True, "RE", 2), (16, 3, 72, 24, False, "RE", 2), (24, 3, 88, 24, False, "RE", 1),
    (24, 5, 96, 40, True, "HS", 2), (40, 5, 240, 40, True, "HS", 1), (40, 5, 240, 40, True, "HS", 1),
    (40, 5, 120, 48, True, "HS", 1), (48, 5, 144, 48, True, "HS", 1), (48, 5, 288, 96, True, "HS", 2),
    (96, 5, 576, 96, True, "HS", 1), (96, 5, 576, 96, True, "HS", 1),
]


class MobileNetV3(nn.Module):
    def __init__(self, setting: list[tuple], last_channel: int, num_classes: int = 1000, dropout: float = 0.0) -> None:
        super().__init__()
        layers: list[nn.Module] = [ConvBNActivation(3, setting[0][0], 3, 2, activation=nn.Hardswish)]
        layers += [InvertedResidual(*cfg) for cfg in setting]
        last_in = setting[-1][3]
        layers.append(ConvBNActivation(last_in, 6 * last_in, 1, activation=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(6 * last_in, last_channel), nn.Hardswish(inplace=True),
                                        nn.Dropout(p=dropout, inplace=True), nn.Linear(last_channel, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def mobilenet_v3_small(num_classes: int = 1000) -> MobileNetV3:
    return MobileNetV3(MOBILENET_V3_SMALL, 1024, num_classes)


# ------------------------------------------------------------------------------------------
# Vision Transformer (torchvision/models/vision_transformer.py)
# ------------------------------------------------------------------------------------------


class MLPBlock(nn.Sequential):
    def __init__(self, dim: int, mlp_dim: int, dropout: float) -> None:
        super().__init__(nn.Linear(dim, mlp_dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(mlp_dim, dim),
                         nn.Dropout(dropout))
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.normal_(m.bias, std=1e-6)


class EncoderBlock(nn.Module):
    def __init__(self, heads: int, dim: int, mlp_dim: int, dropout: float) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-6)
        self.self_attention = nn.MultiheadAttention(dim, heads, dropout=dropout, batch_first=True)
        self.dropout = nn.Dropout(dropout)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = MLPBlock(dim, mlp_dim, dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.ln_1(x)
        y, _ = self.self_attention(y, y, y, need_weights=False)
        x = self.dropout(y) + x
        return x + self.mlp(self.ln_2(x))


class VisionTransformer(nn.Module):
    def __init__(self, image_size: int, patch_size: int, num_layers: int, num_heads: int, hidden_dim: int,
                 mlp_dim: int, num_classes: int = 1000, dropout: float = 0.0) -> None:
        super().__init__()
        self.patch_size, self.hidden_dim = patch_size, hidden_dim
        self.conv_proj = nn.Conv2d(3, hidden_dim, patch_size, patch_size)
        seq_length = (image_size // patch_size) ** 2 + 1
        self.class_token = nn.Parameter(torch.zeros(1, 1, hidden_dim))
        self.pos_embedding = nn.Parameter(torch.empty(1, seq_length, hidden_dim).normal_(std=0.02))
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.Sequential(OrderedDict(
            (f"encoder_layer_{i}", EncoderBlock(num_heads, hidden_dim, mlp_dim, dropout)) for i in range(num_layers)))
        self.ln = nn.LayerNorm(hidden_dim, eps=1e-6)
        self.heads = nn.Sequential(OrderedDict(head=nn.Linear(hidden_dim, num_classes)))
        fan_in = 3 * patch_size**2
        nn.init.trunc_normal_(self.conv_proj.weight, std=math.sqrt(1 / fan_in))
        nn.init.zeros_(self.conv_proj.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        x = self.conv_proj(x).reshape(n, self.hidden_dim, -1).permute(0, 2, 1)
        x = torch.cat([self.class_token.expand(n, -1, -1), x], dim=1)
        x = self.ln(self.layers(self.dropout(x + self.pos_embedding)))
        return self.heads(x[:, 0])


def vit_b_16(image_size: int = 224, num_classes: int = 1000, num_layers: int = 12, hidden_dim: int = 768,
             num_heads: int = 12, mlp_dim: int = 3072) -> VisionTransformer:
    """ViT-B/16; the keyword arguments shrink it (same layers, fewer and narrower) for a quick test."""
    return VisionTransformer(image_size, 16, num_layers, num_heads, hidden_dim, mlp_dim, num_classes)


# ------------------------------------------------------------------------------------------
# A small UNet: the segmentation shape (down, bottleneck, up with skip connections)
# ------------------------------------------------------------------------------------------


class DoubleConv(nn.Sequential):
    def __init__(self, cin: int, cout: int, groups: int = 4) -> None:
        super().__init__(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.GroupNorm(groups, cout), nn.SiLU(),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.GroupNorm(groups, cout), nn.SiLU())


class UNet(nn.Module):
    """Two levels down (max-pool), two up: one nearest-neighbour upsample and one transposed convolution."""

    def __init__(self, cin: int = 3, classes: int = 2, width: int = 8) -> None:
        super().__init__()
        w = width
        self.down1, self.down2 = DoubleConv(cin, w), DoubleConv(w, 2 * w)
        self.pool = nn.MaxPool2d(2)
        self.bottleneck = DoubleConv(2 * w, 4 * w)
        self.up2 = nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(4 * w, 2 * w, 1))
        self.dec2 = DoubleConv(4 * w, 2 * w)
        self.up1 = nn.ConvTranspose2d(2 * w, w, 2, stride=2)
        self.dec1 = DoubleConv(2 * w, w)
        self.head = nn.Conv2d(w, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s1 = self.down1(x)
        s2 = self.down2(self.pool(s1))
        b = self.bottleneck(self.pool(s2))
        d2 = self.dec2(torch.cat([self.up2(b), s2], dim=1))
        d1 = self.dec1(torch.cat([self.up1(d2), s1], dim=1))
        return self.head(d1)
