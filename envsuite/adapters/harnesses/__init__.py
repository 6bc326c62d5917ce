"""Real agent harnesses driving envsuite episodes: the harness's own loop calls a checkpoint served by
``envsuite serve`` (its OpenAI routes, captured), its tools run in the episode's env (a workspace's
sandbox for workspace tasks), and the env's hidden checks grade what it left; the captured calls, scored,
are then trainable episodes (``envsuite train --captured``). docs/workspace.md, "Real agent harnesses".

* :func:`run_agents_sdk_episode`: the OpenAI Agents SDK's ``Runner`` (``pip install 'envsuite[agents]'``);
* :func:`run_mini_swe_agent_episode`: mini-swe-agent's ``DefaultAgent``, its bash commands in the workspace's
  sandbox (``pip install 'envsuite[harnesses]'``: litellm pinned to a known-good release).

The harness packages stay out of the core install; each loads only when its function is called.
"""

from envsuite.adapters.harnesses._episode import HarnessEpisode, ServedModelRef
from envsuite.adapters.harnesses._mini_swe_agent import run_mini_swe_agent_episode
from envsuite.adapters.harnesses._openai_agents import run_agents_sdk_episode

__all__ = ["HarnessEpisode", "ServedModelRef", "run_agents_sdk_episode", "run_mini_swe_agent_episode"]
