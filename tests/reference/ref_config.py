"""Config reader for the reference: the released nested config.json (or a flat text config)."""
import json


class Config:
    def __init__(self, path):
        with open(path) as f:
            top = json.load(f)
        tc = top.get("text_config", top)
        la = tc["linear_attn_config"]
        self.hidden = tc["hidden_size"]
        self.layers = tc["num_hidden_layers"]
        self.vocab = tc["vocab_size"]
        self.eps = tc["rms_norm_eps"]
        self.situ_beta = tc.get("activation_situ_beta", 1.0)
        self.situ_linear_beta = tc.get("activation_situ_linear_beta")  # None = uncapped
        self.dense_inter = tc["intermediate_size"]
        self.first_dense = tc["first_k_dense_replace"]
        self.block = tc["attn_res_block_size"]
        self.mla_heads = tc["num_attention_heads"]
        self.q_lora = tc["q_lora_rank"]
        self.kv_lora = tc["kv_lora_rank"]
        self.nope = tc["qk_nope_head_dim"]
        self.rope = tc["qk_rope_head_dim"]
        self.v_dim = tc["v_head_dim"]
        self.experts = tc["num_experts"]
        self.top_k = tc["num_experts_per_token"]
        self.shared = tc["num_shared_experts"]
        self.moe_inter = tc["moe_intermediate_size"]
        self.latent = tc["routed_expert_hidden_size"]
        self.latent_norm = tc.get("latent_moe_use_norm", True)
        self.renormalize = tc.get("moe_renormalize", True)
        self.scaling = tc.get("routed_scaling_factor", 1.0)
        self.kda_heads = la["num_heads"]
        self.kda_dim = la["head_dim"]
        self.conv = la["short_conv_kernel_size"]
        self.gate_lower_bound = la["gate_lower_bound"]
        self.kda_layers = set(la["kda_layers"])

    def is_kda(self, layer):
        """Layer L (0-based) is KDA iff L+1 is listed in kda_layers (docs/model.md, "Configuration fields")."""
        return (layer + 1) in self.kda_layers
