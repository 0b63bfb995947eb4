# albert-tf images.
#   CPU training image:  docker build --target train -t albert-tf .
#   GPU training image:  docker build --target train --build-arg TF_EXTRA=and-cuda -t albert-tf:gpu .
#   run the demo:        docker run --rm -v $PWD/runs:/app/runs albert-tf
#   pretrain:            docker run --rm [--gpus all] -v /data:/data albert-tf \
#                            python pipelines/pretrain.py --input_file=/data/train-*.tfrecord ...
#   TF Serving image of an exported model (pipelines/export.py; ids or text-in models alike: the
#   model server links tensorflow-text's ops):
#     docker build --target serving --build-arg MODEL_DIR=exported/albert --build-arg MODEL_NAME=albert -t albert-serving .
#     docker run --rm -p 8500:8500 -p 8501:8501 albert-serving

FROM tensorflow/serving:2.20.0 AS serving
# <output_dir>/<model_name> of the export (numbered version directories), inside the build context.
ARG MODEL_DIR=exported/albert
ARG MODEL_NAME=albert
ENV MODEL_NAME=${MODEL_NAME}
COPY ${MODEL_DIR} /models/${MODEL_NAME}

FROM python:3.11-slim AS train
# `and-cuda` pulls NVIDIA's CUDA/cuDNN wheels for tensorflow (GPU image); empty for CPU.
ARG TF_EXTRA=""
ENV PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt \
 && if [ -n "$TF_EXTRA" ]; then pip install --no-cache-dir "tensorflow[$TF_EXTRA]==2.21.0"; fi
COPY pyproject.toml README.md requirements-*.txt ./
COPY albert_tf/ albert_tf/
COPY data_prep/ data_prep/
COPY pipelines/ pipelines/
COPY benchmarks/ benchmarks/
# The package itself (its dependencies are in already): the albert-* commands, and albert_tf
# importable from any directory.
RUN pip install --no-cache-dir --no-deps .
CMD ["python", "pipelines/pretrain.py"]
