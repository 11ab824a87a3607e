import numpy as np
import pytest

from lockstep.config.settings import RouteSettings, SloSettings
from lockstep.streams.route.router import Router
from lockstep.streams.route.tokendrop import patch_mask
from lockstep.topics.codec import decode, encode
from lockstep.topics.schemas import VideoToken
from tests.factories import T0
from tests.unit.test_router import _speech, _window

pytestmark = pytest.mark.unit


def _frame(pixels: np.ndarray) -> VideoToken:
    h, w = pixels.shape
    return VideoToken(stream_id="s", seq=1, t_us=T0, format="gray8", width=w, height=h,
                      data=pixels.astype(np.uint8).tobytes())


def _object_on_plain_background() -> np.ndarray:
    pixels = np.full((48, 64), 90.0)
    pixels[16:32, 24:40] = np.random.default_rng(2).integers(0, 255, (16, 16))
    return pixels


def test_uniform_background_patches_are_marked_droppable_and_detail_is_kept() -> None:
    mask = patch_mask(_frame(_object_on_plain_background()))
    assert mask is not None and (mask.rows, mask.cols) == (6, 8)
    keep = np.unpackbits(np.frombuffer(mask.keep, np.uint8), count=48).reshape(6, 8)
    assert keep[2:4, 3:5].all() and keep.sum() == 4  # the object's 2x2 patches only
    assert mask.dropped == pytest.approx(44 / 48)


def test_a_textured_frame_drops_nothing_and_edge_patches_count() -> None:
    noise = np.random.default_rng(3).integers(0, 255, (50, 70)).astype(float)
    mask = patch_mask(_frame(noise))
    assert mask is not None and (mask.rows, mask.cols) == (7, 9) and mask.dropped == 0.0


def test_the_router_attaches_the_mask_to_vision_routes_and_it_survives_the_wire() -> None:
    window = _window(_frame(_object_on_plain_background()), [_speech()], ("EXIT",))
    request = Router(RouteSettings(), SloSettings()).route(window, T0).request
    assert request is not None and request.token_drop is not None
    assert request.token_drop.dropped == pytest.approx(44 / 48, abs=1e-3)
    assert decode(encode(request)) == request
    off = Router(RouteSettings(patch_size=0), SloSettings()).route(window, T0).request
    assert off is not None and off.token_drop is None
