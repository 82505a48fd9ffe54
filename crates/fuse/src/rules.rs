//! The built-in rules a profile's `[fuse] rules` can name.

/// A fusion or rewrite rule. Names are the profile spelling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    // CPU plugin (OpenVINO "Internal CPU Plugin Optimizations").
    /// Conv followed by any number, in any order, of simple layers.
    ConvSimple,
    /// AveragePool + FakeQuantize (a QuantizeLinear → DequantizeLinear pair in ONNX).
    PoolFakeQuantize,
    /// Gemm/MatMul (FullyConnected) + one activation.
    FcActivation,
    /// Conv(+simple) + depthwise Conv(+simple).
    ConvDepthwise,
    /// Conv(+simple) + Add with another tensor (+simple).
    ConvSum,
    /// Split → k equal Convs → Concat on channels becomes one grouped Conv (rewrite).
    GroupConv,
    /// Pow by 1, Mul by 1, Add of 0 are removed (rewrite).
    IdentityPower,
    // VPU plugin ("Optimizations: Layer Fusion", "Joining", "Decomposition").
    /// Conv + Relu/Clip/LeakyRelu.
    VpuConvActivation,
    /// Conv 3×3 stride 1 pad 1 + MaxPool 2×2 stride 2 pad 0.
    VpuConvPool,
    /// Pool + Relu.
    VpuPoolRelu,
    /// Gemm + Relu.
    VpuFcRelu,
    /// Add/Mul/Max + Relu/LeakyRelu/Clip.
    VpuEltwiseActivation,
    /// Sibling Convs or MatMuls on the same input become one op and a Split (rewrite).
    Join,
    /// Convs and pools over the profile's `tile_bytes` are tiled over channels (rewrite).
    Tile,
}

#[derive(Debug, thiserror::Error)]
#[error("unknown fusion rule '{0}' (known: {known})", known = Rule::ALL.iter().map(|r| r.name()).collect::<Vec<_>>().join(", "))]
pub struct UnknownRule(pub String);

impl Rule {
    pub const ALL: [Rule; 14] = [
        Rule::ConvSimple,
        Rule::PoolFakeQuantize,
        Rule::FcActivation,
        Rule::ConvDepthwise,
        Rule::ConvSum,
        Rule::GroupConv,
        Rule::IdentityPower,
        Rule::VpuConvActivation,
        Rule::VpuConvPool,
        Rule::VpuPoolRelu,
        Rule::VpuFcRelu,
        Rule::VpuEltwiseActivation,
        Rule::Join,
        Rule::Tile,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Rule::ConvSimple => "conv_simple",
            Rule::PoolFakeQuantize => "pool_fake_quantize",
            Rule::FcActivation => "fc_activation",
            Rule::ConvDepthwise => "conv_depthwise",
            Rule::ConvSum => "conv_sum",
            Rule::GroupConv => "group_conv",
            Rule::IdentityPower => "identity_power",
            Rule::VpuConvActivation => "vpu_conv_activation",
            Rule::VpuConvPool => "vpu_conv_pool",
            Rule::VpuPoolRelu => "vpu_pool_relu",
            Rule::VpuFcRelu => "vpu_fc_relu",
            Rule::VpuEltwiseActivation => "vpu_eltwise_activation",
            Rule::Join => "join",
            Rule::Tile => "tile",
        }
    }

    pub fn parse(name: &str) -> Result<Rule, UnknownRule> {
        Rule::ALL
            .into_iter()
            .find(|r| r.name() == name)
            .ok_or_else(|| UnknownRule(name.to_string()))
    }

    /// Rewrites change the graph; the others only group nodes.
    pub fn is_rewrite(self) -> bool {
        matches!(
            self,
            Rule::GroupConv | Rule::IdentityPower | Rule::Join | Rule::Tile
        )
    }

    pub fn parse_all(names: &[String]) -> Result<Vec<Rule>, UnknownRule> {
        names.iter().map(|n| Rule::parse(n)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_list_the_known_ones() {
        for r in Rule::ALL {
            assert_eq!(Rule::parse(r.name()).unwrap(), r);
        }
        let e = Rule::parse("conv_relu").unwrap_err().to_string();
        assert!(
            e.contains("conv_relu") && e.contains("conv_simple") && e.contains("tile"),
            "{e}"
        );
    }
}
