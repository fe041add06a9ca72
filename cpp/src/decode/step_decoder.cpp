#include "ctransformer/decode/step_decoder.hpp"

#include "ctransformer/decode/full_prefix_decoder.hpp"
#include "ctransformer/decode/incremental_decoder.hpp"
#include "decode_checks.hpp"

namespace ct::decode {

std::unique_ptr<StepDecoder> make_step_decoder(const nn::Transformer& model, const IndexArray& src,
                                               const Mask* src_mask, bool use_cache) {
    detail::check_source(model, src, src_mask, "StepDecoder");
    if (use_cache) return std::make_unique<IncrementalDecoder>(model, src, src_mask);
    return std::make_unique<FullPrefixDecoder>(model, src, src_mask);
}

}  // namespace ct::decode
