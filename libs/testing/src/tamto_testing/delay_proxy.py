"""The delaying TCP proxy of the network tests, now `tamto_local.delay_proxy`.

It moved to tamto_local because `tamto chaos --network` (`tamto_local.netlab`) runs
it too; this module keeps `python -m tamto_testing.delay_proxy` (`tamto_testing.netns`)
and the tests' imports working.
"""

from tamto_local.delay_proxy import CHUNK, MARK, SO_ORIGINAL_DST, DelayProxy, main

__all__ = ["CHUNK", "MARK", "SO_ORIGINAL_DST", "DelayProxy", "main"]

if __name__ == "__main__":
    main()
