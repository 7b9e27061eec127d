# JupyterLab serving the course notebooks (CPU build of torch).
#   docker build -t agentic-rl-course . && docker run -p 8888:8888 agentic-rl-course
FROM python:3.11-slim
WORKDIR /course
COPY . .
RUN pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu torch==2.13.0 \
 && pip install --no-cache-dir -e ".[dev,trl,openenv,real]"
ENV COURSE_SCALE=cpu
EXPOSE 8888
CMD ["jupyter", "lab", "--ip=0.0.0.0", "--port=8888", "--no-browser", "--allow-root", "--notebook-dir=/course/notebooks"]
