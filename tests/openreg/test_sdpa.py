# Ported from torch_openreg's tests/test_sdpa.py
# (pytorch/pytorch: test/cpp_extensions/open_registration_extension/torch_openreg/tests/test_sdpa.py).
# Adapted:
#   - `import torch_openreg` -> `import npu_lab`; device "openreg" -> "npu".
#   - test_fused_sdp_choice_privateuseone: the original's bare `assert` is written as
#     self.assertEqual(..., SDPBackend.OVERRIDEABLE.value) (the same check; a bare assert would vanish under -O).
#   - no run_tests() call (collected by pytest).

import collections
import functools

import torch
from torch.nn.attention import SDPBackend
from torch.testing._internal.common_nn import NNTestCase
from torch.testing._internal.common_utils import skipIfTorchDynamo

import npu_lab  # noqa: F401

SdpaShape = collections.namedtuple("Sdpa_Shape", ["batch", "num_heads", "seq_len", "head_dim"])


class TestSDPAPrivateUse1Only(NNTestCase):
    @skipIfTorchDynamo()
    def test_fused_sdp_choice_privateuseone(self):
        batch_size, seq_len, num_heads, head_dim = 4, 256, 2, 128
        make_tensor = functools.partial(torch.rand, device="cpu", dtype=torch.float16)
        shape = SdpaShape(batch_size, num_heads, seq_len, head_dim)
        q_cpu, k_cpu, v_cpu = make_tensor(shape), make_tensor(shape), make_tensor(shape)
        q_privateuse1 = q_cpu.to("npu")
        k_privateuse1 = k_cpu.to("npu")
        v_privateuse1 = v_cpu.to("npu")
        self.assertEqual(
            torch._fused_sdp_choice(q_privateuse1, k_privateuse1, v_privateuse1),
            SDPBackend.OVERRIDEABLE.value,
        )

    def test_scaled_dot_product_fused_attention_overrideable(self):
        batch_size, seq_len, num_heads, head_dim = 4, 256, 2, 128
        make_tensor = functools.partial(torch.rand, device="cpu", dtype=torch.float16)
        shape = SdpaShape(batch_size, num_heads, seq_len, head_dim)
        q_cpu, k_cpu, v_cpu = make_tensor(shape), make_tensor(shape), make_tensor(shape)
        q_privateuse1 = q_cpu.to("npu")
        k_privateuse1 = k_cpu.to("npu")
        v_privateuse1 = v_cpu.to("npu")
        torch.nn.functional.scaled_dot_product_attention(
            q_privateuse1, k_privateuse1, v_privateuse1, attn_mask=None, dropout_p=0.0
        )

    def test_scaled_dot_product_fused_attention_overrideable_backward(self):
        batch_size, seq_len, num_heads, head_dim = 4, 256, 2, 128
        make_tensor = functools.partial(torch.rand, device="cpu", dtype=torch.float16, requires_grad=True)
        shape = (batch_size, num_heads, seq_len, head_dim)
        q_cpu, k_cpu, v_cpu = make_tensor(shape), make_tensor(shape), make_tensor(shape)
        attn_mask = make_tensor((batch_size, num_heads, seq_len, seq_len))
        q_privateuse1 = q_cpu.to("npu")
        k_privateuse1 = k_cpu.to("npu")
        v_privateuse1 = v_cpu.to("npu")
        attn_mask_privateuse1 = attn_mask.to("npu")
        (
            output,
            logsumexp,
            cum_seq_q,
            cum_seq_k,
            max_q,
            max_k,
            philox_seed,
            philox_offset,
            debug_attn_mask,
        ) = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
            q_privateuse1, k_privateuse1, v_privateuse1, attn_bias=attn_mask_privateuse1
        )

        rand_upward = torch.rand(shape, device="cpu", dtype=torch.float16, requires_grad=False)
        rand_upward_privateuse1 = rand_upward.to("npu")
        grad_input_mask = [True, True, True, True]
        grad_q, grad_k, grad_v, grad_attn_mask = (
            torch.ops.aten._scaled_dot_product_fused_attention_overrideable_backward(
                rand_upward_privateuse1,
                q_privateuse1,
                k_privateuse1,
                v_privateuse1,
                attn_mask_privateuse1,
                grad_input_mask,
                output,
                logsumexp,
                cum_seq_q,
                cum_seq_k,
                max_q,
                max_k,
                dropout_p=0.0,
                is_causal=False,
                philox_seed=philox_seed,
                philox_offset=philox_offset,
            )
        )
