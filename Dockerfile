# Hugging Face Space (sdk: docker) or any container host: `docker build -t medheb . &&
# docker run -p 7860:7860 -e ADMIN_PASSWORD=... -v medheb-data:/data medheb`.
# Runs as uid 1000 (what Spaces require), serves on 7860, offline at run time.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    GRADIO_ANALYTICS_ENABLED=False \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    HOST=0.0.0.0 \
    PORT=7860

# git: the benchmark records `git describe` in its results when the checkout has history.
RUN apt-get update \
    && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/*

RUN useradd --create-home --uid 1000 user
USER user
ENV HOME=/home/user \
    PATH=/home/user/.local/bin:$PATH
WORKDIR /home/user/app

# Dependencies first, so code changes do not reinstall them. torch 2.14.1 comes from PyPI
# here (the project machines install it from local disk); see docs/deploy.md for CPU wheels.
COPY --chown=user requirements.txt .
RUN pip install --user -r requirements.txt

COPY --chown=user . .

# With Space persistent storage mounted at /data, Settings puts DATA_DIR at /data/medheb
# (database, demo corpus, indices, runs); otherwise data/runtime inside the container.
EXPOSE 7860
CMD ["python", "app.py"]
