"""A small load test with vllm bench serve's definitions: two concurrency levels, one table."""

import anyio
from _args import engine_args

from unillm.bench import Load, Synthetic, Url, markdown_table, run_suite


async def main() -> None:
    args = engine_args(__doc__, "http://127.0.0.1:8000")
    report = await run_suite(
        [Url(args.engine, args.url[0], api_key=args.api_key)],
        Synthetic(num_prompts=8, input_len=16, output_len=8),
        [Load(max_concurrency=1), Load(max_concurrency=4)],
    )
    print(markdown_table(report.runs))


anyio.run(main)
