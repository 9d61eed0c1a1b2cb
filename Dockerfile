# One image for every node: `placement node ...` (see docker-compose.yml).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY placement ./placement
COPY membership ./membership
COPY simulations ./simulations
COPY spark_jobs ./spark_jobs
RUN pip install --no-cache-dir '.[service]'
EXPOSE 7001/udp 8001/tcp
ENTRYPOINT ["placement"]
CMD ["node", "--help"]
