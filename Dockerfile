# Hugging Face Space (sdk: docker) or any container host: `docker build -t medheb . &&
# docker run -p 7860:7860 -e ADMIN_PASSWORD=... -v medheb-data:/data medheb`.
# Runs as uid 1000 (what Spaces require), serves on 0.0.0.0:7860 (HOST and PORT below; a
# workstation's `python app.py` binds 127.0.0.1), offline at run time.
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

# /data is where a Space mounts persistent storage; without it, the same folder in the
# container keeps the data of one run. Either way the app writes only there.
RUN useradd --create-home --uid 1000 user && mkdir -p /data && chown user:user /data
USER user
ENV HOME=/home/user \
    PATH=/home/user/.local/bin:$PATH
WORKDIR /home/user/app

# Runtime dependencies only (tests and linters are in requirements-dev.txt), first, so code
# changes do not reinstall them. torch and torchvision come as CPU wheels (a Space has no GPU;
# the CUDA ones are several GB more); requirements.txt then finds them already satisfied.
COPY --chown=user requirements.txt .
RUN pip install --user --index-url https://download.pytorch.org/whl/cpu \
        torch==2.14.1 torchvision==0.29.1 \
    && pip install --user -r requirements.txt

# The app folder is read-only at run time (tests/test_container_start.py starts the app
# this way): everything written goes to DATA_DIR (/data/medheb with persistent storage).
COPY --chown=root:root . .

# Settings puts DATA_DIR at /data/medheb (database, demo corpus, indices, probes, runs).
EXPOSE 7860
CMD ["python", "app.py"]
