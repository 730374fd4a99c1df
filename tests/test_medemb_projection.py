"""medemb-lite's visual projection: running channel moments, standardisation, old checkpoints."""

from __future__ import annotations

import pytest
import torch

from medheb_app.models.medemb_projection import ChannelMoments, VisualProjection

torch.manual_seed(0)
TOKENS = torch.randn(50, 1280) * 3 + 7


def test_running_moments_match_the_batch_statistics():
    moments = ChannelMoments()
    moments.add(TOKENS[:20])
    moments.add(TOKENS[20:].reshape(2, 15, 1280))  # any leading shape
    mean, std = moments.mean_std()
    torch.testing.assert_close(mean, TOKENS.mean(0), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(std, TOKENS.std(0), atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="at least two"):
        ChannelMoments().mean_std()


def test_fitted_kind_is_standardised_and_the_other_kind_is_untouched():
    projection = VisualProjection()
    before = projection(TOKENS, "frame")
    moments = ChannelMoments()
    moments.add(TOKENS)
    projection.fit(moments, "image")
    z = (TOKENS - TOKENS.mean(0)) / TOKENS.std(0)
    torch.testing.assert_close(projection(TOKENS, "image"), projection.linear(z), atol=1e-4,
                               rtol=1e-4)  # fmt: skip
    torch.testing.assert_close(projection(TOKENS, "frame"), before)


def test_a_bare_linear_state_from_older_checkpoints_loads_as_unstandardised():
    old = torch.nn.Linear(1280, 384)
    projection = VisualProjection()
    projection.load_weights(old.state_dict())
    torch.testing.assert_close(projection(TOKENS), old(TOKENS))
    fitted = VisualProjection()
    moments = ChannelMoments()
    moments.add(TOKENS)
    fitted.fit(moments, "image")
    restored = VisualProjection()
    restored.load_weights(fitted.state_dict())
    torch.testing.assert_close(restored(TOKENS), fitted(TOKENS))
