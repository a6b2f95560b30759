"""unillm as the model under agent frameworks: pydantic-ai, the OpenAI Agents SDK and LangChain.

Each module is a thin translation to a :class:`unillm.Client` (one ``LLM`` or a ``Fleet``), imported
only when used (``import unillm`` does not import it), and needs its extra:

    pip install 'unillm-sdk[pydantic-ai]'     # unillm.integrations.pydantic_ai.UnillmModel
    pip install 'unillm-sdk[openai-agents]'   # unillm.integrations.openai_agents.UnillmAgentsModel
    pip install 'unillm-sdk[langchain]'       # unillm.integrations.langchain.ChatUnillm
"""
